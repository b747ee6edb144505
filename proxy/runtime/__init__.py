"""The running proxy: what it is made of (state, quotas, usage, logins, producer-ID sources, the cluster, the fleet,
the chain of handlers), built from its configuration and started and stopped as one (``wiring``); and its serving:
the listeners (bootstrap and one per broker), the broker registry behind the address rewriting, what each new
connection is handed, and the staged shutdown (``serving``).

May import: proxy.connection, proxy.handlers, proxy.producer_ids, proxy.cluster, proxy.settings, proxy.security,
proxy.state, proxy.reporting, proxy.files, proxy.decision, protocol, quotas, allocator.
"""
