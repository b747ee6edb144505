"""Every fuzz target (``tests/fuzz``) under atheris and libFuzzer for ``--seconds`` each (ten minutes by default),
from the committed seed corpus, its new inputs kept in a scratch corpus (``python -m bench.fuzz``; ``make fuzz``
runs it, then ``bench.live_fuzz``). Writes ``bench/fuzz-results.json``: per target the seconds, executions,
coverage (libFuzzer's ``cov``, edges of the instrumented Python, and ``ft``, its features), the corpus it grew to,
and the inputs that crashed it, copied to ``bench/fuzz-findings/`` (libFuzzer stops at a target's first: fix it,
keep the input as ``tests/fuzz/corpus/<target>/finding-*`` and run again).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import new_results, write_results
from tests.fuzz.seeds import CORPUS
from tests.fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "bench" / "fuzz-findings"
_STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
"""libFuzzer's status lines (``#123 NEW cov: 40 ft: 90 corp: 12/800b ...``); the last, ``DONE``, sums the run up."""


def fuzz(name: str, seconds: int, scratch: Path) -> dict[str, Any]:
    """One target for ``seconds``: what libFuzzer said of it at its end."""
    corpus = scratch / name
    corpus.mkdir()
    artifacts = scratch / f"{name}-artifacts"
    artifacts.mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tests.fuzz.run", name, f"-max_total_time={seconds}",
                           f"-artifact_prefix={artifacts}/", str(corpus), str(CORPUS / name)],
                          cwd=ROOT, capture_output=True, text=True, timeout=seconds + 600)
    statuses = _STATUS.findall(done.stderr)
    executions, coverage, features, corpus_inputs, corpus_size = statuses[-1] if statuses else ("0",) * 5
    crashes = sorted(artifacts.glob("crash-*")) + sorted(artifacts.glob("timeout-*")) + sorted(artifacts.glob("oom-*"))
    kept = []
    for crash in crashes:
        FINDINGS.mkdir(exist_ok=True)
        target = FINDINGS / f"{name}-{crash.name}"
        shutil.copy(crash, target)
        kept.append(str(target.relative_to(ROOT)))
    result = {"seconds": round(time.monotonic() - started), "executions": int(executions),
              "coverage_edges": int(coverage), "coverage_features": int(features), "corpus_inputs": int(corpus_inputs),
              "corpus_bytes": corpus_size, "exit_code": done.returncode, "crashes": kept}
    if done.returncode and not kept:
        result["output"] = done.stderr[-3000:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/fuzz-results.json")
    parser.add_argument("--seconds", type=int, default=600, help="each target's time (default 600)")
    parser.add_argument("--only", nargs="*", choices=sorted(TARGETS), help="targets (all when not given)")
    args = parser.parse_args()
    results = new_results()
    results["settings"] = {"seconds_per_target": args.seconds}
    with tempfile.TemporaryDirectory(prefix="kqp-fuzz-") as scratch:
        for name in args.only or TARGETS:
            result = results["cases"][name] = fuzz(name, args.seconds, Path(scratch))
            print(f"{name}: {result}", flush=True)
    write_results(args.out, results)
    return 1 if any(case["crashes"] or case["exit_code"] for case in results["cases"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
