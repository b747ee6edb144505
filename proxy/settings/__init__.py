"""The proxy's settings: what they are (``config``) and how they are read from the command line and
the --config file, checked as they are read (``loading``). Settings of one feature that live in
their own --config section are read by that feature's room (``[fleet]``, ``[allocator]``).

May import: proxy.decision, proxy.files, proxy.security, quotas.
"""
