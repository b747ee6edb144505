"""Kafka wire format: framing, headers, codecs and response rewriting.

Owns every byte-level fact about the Kafka protocol. Works on ``bytes``/``memoryview`` only and
raises :class:`protocol.errors.ProtocolError` for malformed input. Never imports asyncio, never
touches sockets, knows nothing about quotas.
"""
