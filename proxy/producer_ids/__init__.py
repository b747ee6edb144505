"""Where the proxy's producer IDs come from (KIP-730): ``[allocator]`` settings, the block sources
(the embedded block log, a remote allocator, blocks claimed through the cluster) and the IDs handed
out from them, and the blocks counted as they are handed out. The requests that use them are
handled in ``proxy.handlers.producer_ids``.

May import: proxy.cluster, proxy.decision, proxy.reporting, proxy.settings, proxy.state, protocol, quotas, allocator.
"""
