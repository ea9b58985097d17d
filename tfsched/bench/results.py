"""Writing a side-by-side run: one JSON record and one Markdown table."""

from __future__ import annotations

import json
import platform

from tfsched.bench.run import ModeResult
from tfsched.io import write_atomic


def summarize(results: dict[str, ModeResult], config: dict) -> dict:
    base = results["baseline"].throughput if "baseline" in results else 0.0
    rows = []
    for r in results.values():
        row = r.to_json()
        row["vs_baseline"] = r.throughput / base if base else None
        rows.append(row)
    return {"benchmark": "tfsched bench", "config": config, "machine": platform.platform(), "modes": rows}


def markdown(summary: dict) -> str:
    c = summary["config"]
    link = f"{c['bandwidth']}" + (f", {c['latency']} latency" if c.get("latency") else "")
    lines = [
        f"**{c['model']}** ({c['mode']}), {c['ps']} PS x {c['workers']} workers, {link}, "
        f"{c['rounds']} interleaved rounds of {c['steps']} steps per worker",
        "",
        "| mode | steps/s | vs baseline | p50 step (s) | p95 step (s) | p95/p50 | straggler |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["modes"]:
        vs = f"{r['vs_baseline']:.3f}x" if r["vs_baseline"] else "-"
        lines.append(
            f"| {r['mode']} | {r['throughput_steps_per_s']:.3f} | {vs} | {r['p50_s']:.4f} | {r['p95_s']:.4f} | "
            f"{r['p95_over_p50']:.3f} | {r['straggler']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def write(summary: dict, json_path: str) -> str:
    """Write ``<name>.json`` and ``<name>.md``; returns the Markdown path."""
    write_atomic(json_path, lambda f: json.dump(summary, f, indent=1))
    md_path = json_path[: -len(".json")] + ".md" if json_path.endswith(".json") else json_path + ".md"
    write_atomic(md_path, lambda f: f.write(markdown(summary)))
    return md_path
