"""Pure quota engines and their configuration.

Sampled rates, token buckets, Bloom filters, quota managers, entity resolution and metric
definitions. Time is always passed in (``now_ms``); no I/O, no asyncio, no imports from the
other packages of this project.
"""
