"""The commands: ``kafka-quota-proxy`` runs the proxy until SIGTERM/SIGINT, with its workers
(``main``, which also runs ``report``), and the operator's admin commands, ``users`` and ``quotas``
(``admin``).

May import: proxy.runtime, proxy.handlers, proxy.cluster, proxy.settings, proxy.security, proxy.state, protocol, quotas,
allocator,
pipeline (the ``report`` command runs the PySpark job).
"""
