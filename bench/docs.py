"""The documentation's figures, made from the benchmarks' results (``python -m bench.docs``; ``make bench`` runs it
last): the table of docs/fidelity.md from ``bench/fidelity-results.json``, and the plots of docs/benchmarks.md
from ``bench/results.json`` and ``bench/relay-floor-results.json``, each the latest run's, with the spread between
its interleaved rounds drawn. A test holds the committed table to the committed results."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIDELITY_PAGE = ROOT / "docs" / "fidelity.md"
TABLE_START = "<!-- fidelity table: made by python -m bench.docs from bench/fidelity-results.json -->"
TABLE_END = "<!-- end of the fidelity table -->"
IMAGES = ROOT / "docs" / "img"
TARGETS = (("direct", "direct"), ("proxy", "this proxy"), ("proxy_with_quotas", "this proxy"),
           ("kroxylicious", "Kroxylicious 0.12"))
"""A result's targets as the plots name them (the proxy is measured with quotas in some figures)."""
COLOURS = {"direct": "#7f7f7f", "this proxy": "#1f77b4", "Kroxylicious 0.12": "#ff7f0e"}


def _throttled(case: dict[str, Any]) -> str:
    """Throttled responses, Kafka's / the proxy's ("-" where the client does not show them)."""
    kafka, proxy = case["kafka"]["throttles_ms"], case["proxy"]["throttles_ms"]
    if not kafka and not proxy:
        return "-"
    counts = sum(1 for throttle in kafka if throttle), sum(1 for throttle in proxy if throttle)
    text = f"{counts[0]} / {counts[1]}"
    if case.get("kafka_empty_responses") == counts[0] and case.get("proxy_empty_responses") == counts[1] \
            and counts[0]:
        text += " (all empty)"
    return text


def fidelity_table(results: dict[str, Any]) -> str:
    rows = ["| case | Apache Kafka | the proxy | ratio | throttled responses (Kafka / proxy) |",
            "|---|---|---|---|---|"]
    for name, case in results["cases"].items():
        throttled = _throttled(case)
        if name.startswith("connection_creation_rate"):
            throttled = f"{len(case['kafka']['throttles_ms'])} / {len(case['proxy']['throttles_ms'])} refused"
        rows.append(f"| {name} | {case['kafka']['elapsed_s']:.1f} s | {case['proxy']['elapsed_s']:.1f} s | "
                    f"{case['elapsed_ratio']:.2f}x | {throttled} |")
    ratios = [case["elapsed_ratio"] for case in results["cases"].values()]
    rows.append("")
    rows.append(f"{len(ratios)} cases; the proxy's time over Kafka's: {min(ratios):.2f}x to {max(ratios):.2f}x, "
                f"median {statistics.median(ratios):.2f}x.")
    return "\n".join(rows)


def page_with_table(page: str, table: str) -> str:
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.DOTALL)
    if not pattern.search(page):
        raise SystemExit(f"{FIDELITY_PAGE} has no fidelity table markers")
    return pattern.sub(lambda _: f"{TABLE_START}\n\n{table}\n\n{TABLE_END}", page)


def _targets(figure: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(label, figure[key]) for key, label in TARGETS if key in figure]


def _pyplot() -> Any:
    """matplotlib's pyplot drawing to files (no display here); imported when a plot is drawn, as only these need it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def plot_throughput(results: dict[str, Any], out: Path) -> None:
    """Medians of the interleaved rounds, each round a dot: the spread is the machine's."""
    pyplot = _pyplot()
    figures = (("a_throughput_mb_s", "(a) produce, librdkafka"), ("f_consume_mb_s", "(f) consume, librdkafka"),
               ("h_producer_performance_mb_s", "(h) ProducerPerformance"))
    fig, axes = pyplot.subplots(1, len(figures), figsize=(12, 4))
    for axis, (key, title) in zip(axes, figures, strict=True):
        targets = _targets(results[key])
        for index, (label, values) in enumerate(targets):
            axis.bar(index, values["median"], color=COLOURS[label], label=label)
            axis.scatter([index] * len(values["runs"]), values["runs"], color="black", s=10, zorder=3)
        axis.set_xticks(range(len(targets)), [label for label, _ in targets], fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.set_ylabel("MB/s")
    fig.suptitle(f"Throughput: medians of {results['settings']['rounds']} interleaved rounds (dots: each round)")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=100)
    pyplot.close(fig)


def plot_cpu(results: dict[str, Any], floor: dict[str, Any], out: Path) -> None:
    pyplot = _pyplot()
    names = {"a": "(a) produce", "e": "(e) produce, quotas", "f": "(f) consume", "h": "(h) ProducerPerformance"}
    fig, axis = pyplot.subplots(figsize=(12, 4))
    width = 0.35
    for index, (figure, label) in enumerate(names.items()):
        for offset, (key, target) in enumerate((("proxy", "this proxy"), ("kroxylicious", "Kroxylicious 0.12"))):
            measured = results["cpu_ms_per_mb"][figure]
            value = measured.get(key, measured.get(f"{key}_with_quotas"))
            if value is not None:
                axis.bar(index + (offset - 0.5) * width, value, width, color=COLOURS[target],
                         label=target if index == 0 else None)
        axis.text(index, -0.25, label, ha="center", fontsize=9)
    for mode, style in (("splice", "--"), ("copy", ":")):
        axis.axhline(floor[mode]["cpu_ms_per_mb"], color="black", linestyle=style,
                     label=f"bare relay, {mode} ({floor[mode]['cpu_ms_per_mb']:.2f} ms/MB)")
    axis.set_xticks([])
    axis.set_ylabel("CPU ms per MB")
    axis.legend(fontsize=8)
    axis.set_title("CPU per MB moved, each proxy's own process, beside a bare relay's floor")
    fig.tight_layout()
    fig.savefig(out / "cpu.png", dpi=100)
    pyplot.close(fig)


def plot_fidelity(results: dict[str, Any], out: Path) -> None:
    pyplot = _pyplot()
    cases = list(results["cases"].items())
    fig, axis = pyplot.subplots(figsize=(10, 7))
    axis.barh(range(len(cases)), [case["elapsed_ratio"] for _, case in cases], color=COLOURS["this proxy"])
    axis.set_yticks(range(len(cases)), [name for name, _ in cases], fontsize=8)
    axis.invert_yaxis()
    axis.axvline(1.0, color="black")
    axis.set_xlim(0.8, 1.2)
    axis.set_xlabel("the proxy's time over Apache Kafka's, same quota, same workload")
    fig.tight_layout()
    fig.savefig(out / "fidelity.png", dpi=100)
    pyplot.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docs", description=__doc__)
    parser.add_argument("--images", type=Path, default=IMAGES, help="where the plots go")
    args = parser.parse_args(argv)
    fidelity = json.loads((ROOT / "bench" / "fidelity-results.json").read_text())
    FIDELITY_PAGE.write_text(page_with_table(FIDELITY_PAGE.read_text(), fidelity_table(fidelity)))
    args.images.mkdir(parents=True, exist_ok=True)
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    plot_throughput(results, args.images)
    plot_cpu(results, json.loads((ROOT / "bench" / "relay-floor-results.json").read_text()), args.images)
    plot_fidelity(fidelity, args.images)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
