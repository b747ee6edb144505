"""The cluster behind the proxy, as the proxy itself talks to it: its own requests and logins
(``upstream``), the cluster's view the mutation quota needs (``info``: partition counts, default
partitions), topic ids' names (``topic_names``), delegation tokens' owners (``token_owners``), a single-partition
topic read and written with idempotent records (``client``), the fleet of proxies that shares one quota through
such a topic (``fleet``), and the usage log's lines appended to a topic too (``usage_topic``).

May import: proxy.settings, proxy.security, proxy.reporting, proxy.state, protocol, quotas, allocator (a file written
durably: where the usage log's lines sent to the cluster end).
"""
