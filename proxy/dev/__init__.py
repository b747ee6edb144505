"""For developers: Apache Kafka as child processes (``apache_kafka``, its jars in ``kafka_jars``) for
``make run`` (``run``), the integration tests, the benchmarks and the soak. Never used by the proxy.

May import: proxy.cli, proxy.cluster, proxy.settings, protocol.
"""
