"""Run time of the reporting job on this machine (``python -m bench.pipeline``).

Generates usage logs of 1M and 10M rows (six principals, one misbehaving) and times the whole job
(read with explicit schemas, exact percentiles, churners, recommended quotas, HTML with charts)
in a local Spark session using every core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.report import write_results
from pipeline.job import run, spark_session
from pipeline.synthetic import stream_usage_log


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/pipeline-results.json")
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args()
    results: dict[str, object] = {"cpus": os.cpu_count(), "master": "local[*]", "driver_memory": args.driver_memory}
    spark = spark_session("local[*]", driver_memory=args.driver_memory)
    try:
        for count in args.rows:
            with tempfile.TemporaryDirectory() as directory:
                usage = Path(directory) / "usage"
                started = time.perf_counter()
                stream_usage_log(usage, count)
                generated_s = time.perf_counter() - started
                size = sum(path.stat().st_size for path in usage.iterdir())
                started = time.perf_counter()
                report = run(spark, str(usage), Path(directory) / "out")
                job_s = time.perf_counter() - started
                assert report.lines == count
                results[f"{count}_rows"] = {"usage_log_mb": round(size / 1e6), "generate_s": round(generated_s, 1),
                                            "job_s": round(job_s, 1), "principals": len(report.summary)}
                shutil.rmtree(usage)
            print(results, flush=True)
    finally:
        spark.stop()
    write_results(args.out, results)


if __name__ == "__main__":
    main()
