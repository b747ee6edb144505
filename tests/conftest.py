"""Hypothesis without its wall-clock checks, for every test that uses it: a 200 ms deadline per example and a
health check on slow data generation fail a test on a busy machine for the machine's speed, not for anything the
example found (as DeadlineExceeded, or as Flaky when the rerun is fast)."""

from hypothesis import HealthCheck, settings

settings.register_profile("any-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any-machine")
