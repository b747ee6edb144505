"""The asyncio shell around the pure packages: listeners, connections, upstream pool, CLI.

The only package that opens sockets or reads the clock for quota decisions. It forwards frames
it does not intercept as their original bytes and keeps every per-connection buffer bounded.
"""
