"""What the proxy keeps while it runs: the quota engines with their configuration (the quota file
and the overrides set through the client-quota APIs), the quota clock ``now_ms`` (``quota_service``),
and the PID ledger as the request path uses it: records batched onto a worker thread, look-ups
of producer IDs the cache does not hold (``pid_ledger``).

May import: proxy.files, quotas, allocator.
"""
