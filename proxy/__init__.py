"""The asyncio shell around the pure packages (protocol/, quotas/, allocator/): the only package
that opens sockets or reads the clock for quota decisions. It forwards frames it does not intercept
as their original bytes and keeps every per-connection buffer bounded.

Its rooms, each a package whose docstring says what lives there and what it may import, from the
top floor down (a room imports only rooms below it; ``tests/unit/test_architecture.py`` holds it):

    dev           Apache Kafka as child processes, ``make run``
    cli           the commands: run the proxy, admin commands
    runtime       listeners, broker registry, wiring, staged shutdown
    connection    the connection engine            handlers      one handler per Kafka API
    producer_ids  where producer IDs come from (KIP-730)
    cluster       the proxy's own requests to the cluster, the fleet
    settings      flags and the --config file
    security      TLS, SASL terminate and inspect   state         quota engines, PID ledger
    decision      what a handler decides            reporting     metrics, usage log
    files         the operator's files

The connection engine and the handlers stand side by side: neither imports the other; the runtime
hands the handlers to each connection.
"""

__version__ = "0.1.0"
"""The one place the version is written: the package's metadata (``pyproject.toml``) and ``--version`` read it."""
