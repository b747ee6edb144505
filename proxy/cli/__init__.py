"""The commands: ``kafka-quota-proxy`` runs the proxy until SIGTERM/SIGINT, with its workers
(``main``, which also runs ``report``), and the operator's admin commands, ``users`` and ``quotas``
(``admin``); the settings reference, made from every room's settings (``settings_reference``).

May import: proxy.runtime, proxy.handlers, proxy.producer_ids, proxy.cluster, proxy.settings, proxy.security,
proxy.state, protocol, quotas, allocator,
pipeline (the ``report`` command runs the PySpark job).
"""
