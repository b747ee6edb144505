"""The running proxy: the listeners (bootstrap and one per broker), the broker registry behind the
address rewriting, the wiring of handlers, quotas, state and cluster into each new connection, and
the staged shutdown (``server``).

May import: proxy.connection, proxy.handlers, proxy.producer_ids, proxy.cluster, proxy.settings, proxy.security,
proxy.state, proxy.reporting, proxy.files, proxy.decision, protocol, quotas, allocator.
"""
