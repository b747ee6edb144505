"""What the proxy reports: the Prometheus metrics and their HTTP endpoint (``metrics``), and the
usage log, one JSON line per second of traffic of one user and client id, that the PySpark
pipeline reads (``usage_log``).

May import: quotas, allocator.
"""
