"""Hypothesis without its wall-clock checks, for every test that uses it: a 200 ms deadline per example and a
health check on slow data generation fail a test on a busy machine for the machine's speed, not for anything the
example found (as DeadlineExceeded, or as Flaky when the rerun is fast).

And Toxiproxy, which the network-fault tests build from its Go module the first time (half a minute of both cores),
built while the unit tests run when they run first (``make test``), not while a test of the proxy's timing does."""

import contextlib
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from proxy.dev.toxiproxy import toxiproxy_server

settings.register_profile("any-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any-machine")


UNIT_TESTS = Path(__file__).parent / "unit"


def pytest_collection_finish(session: pytest.Session) -> None:
    items = session.items
    if items and items[0].path.is_relative_to(UNIT_TESTS) and any(
            item.path.name == "test_network_faults.py" for item in items):
        threading.Thread(target=_build_toxiproxy, name="toxiproxy build", daemon=True).start()


def _build_toxiproxy() -> None:
    with contextlib.suppress(Exception):  # whatever failed, the network-fault tests' own build says so, in its place
        toxiproxy_server()
