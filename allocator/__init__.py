"""Producer-ID blocks (KIP-730) and the PID ledger.

Durable files, recovery and the AllocateProducerIds service logic. File I/O only: no sockets,
no asyncio. May depend on ``protocol``.
"""
