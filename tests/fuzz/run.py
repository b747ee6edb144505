"""One fuzz target under atheris and libFuzzer:
``python -m tests.fuzz.run [--ours-only] TARGET [libFuzzer flags] [corpus dirs]`` (e.g. ``-max_total_time=60
/tmp/corpus tests/fuzz/corpus/produce``: new inputs go into the first directory). The proxy's packages, and
kafka-python's codecs beneath them, are instrumented for coverage; ``--ours-only`` leaves the codecs out, which
starts in a second rather than four (the test suite's few seconds of each target)."""

from __future__ import annotations

import sys

import atheris

OURS = ["protocol", "proxy", "quotas", "tests.fuzz"]
CODECS = ["kafka.protocol"]


def main() -> None:
    arguments = sys.argv[1:]
    ours_only = arguments[:1] == ["--ours-only"]
    arguments = arguments[1:] if ours_only else arguments
    with atheris.instrument_imports(include=OURS if ours_only else OURS + CODECS):
        from tests.fuzz.targets import TARGETS
    if not arguments or arguments[0] not in TARGETS:
        sys.exit(f"usage: python -m tests.fuzz.run [--ours-only] TARGET [libFuzzer flags] [corpus dirs]; targets: "
                 f"{', '.join(TARGETS)}")
    atheris.Setup([sys.argv[0], *arguments[1:]], TARGETS[arguments[0]])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
