"""The demo's binding-cap comparison, stored and rendered (issue 57 item 5).

``bash tools/demo.sh`` runs the comparison registered in
``benchmarks/configs/demo_binding_cap.yaml`` (``llm_operator_sandbox.cap_effect``) and
writes each run's record to ``/tmp/llmop-demo-plots/LABEL.json``; a run kept for the
record is copied to ``benchmarks/data/demo_binding_cap/run_N.json``. This renders every
stored run into the ``demo-binding-cap`` section of ``benchmarks/results/adaptation.md``:

    .venv/bin/python -m benchmarks.demo_binding_cap --write-results
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from llm_operator_sandbox.cap_effect import METRICS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "demo_binding_cap"
PAGE = ROOT / "benchmarks" / "results" / "adaptation.md"
SECTION = "demo-binding-cap"


def runs() -> list[tuple[str, dict[str, Any]]]:
    """The stored runs, oldest first: (file name, record)."""
    files = sorted(DATA.glob("run_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    return [(p.name, json.loads(p.read_text())) for p in files]


def _cell(s: dict[str, Any], fmt: str) -> str:
    return f"{fmt.format(s['mean'])} [{fmt.format(s['low'])}, {fmt.format(s['high'])}]"


FORMATS = {label: fmt for label, _, fmt, _ in METRICS}  # as the demo prints them


def render(stored: list[tuple[str, dict[str, Any]]]) -> str:
    """The section's markdown (pure)."""
    lines = [f"<!-- {SECTION}:begin -->",
             "## The demo: the adapted cap against the tuned static cap, on the same load", "",
             "`bash tools/demo.sh`, step 5: after the adaptation has moved the cap, the same "
             "load (32 clients, 128 requests of 128 + 128 tokens) 6 times, interleaved "
             "(adapted, static, static, adapted, static, adapted), the cap held live by "
             "`spec.adaptation.minMaxNumSeqs` = `maxMaxNumSeqs` (no restart). Registered "
             "before the first run in `benchmarks/configs/demo_binding_cap.yaml`. Each cell: "
             "the mean [lowest, highest] of an arm's 3 rounds; a difference is called real "
             "only where the ranges do not overlap. Stored: "
             "`benchmarks/data/demo_binding_cap/`; rendered by `.venv/bin/python -m "
             "benchmarks.demo_binding_cap --write-results`.", "",
             "**Measured on the CPU engine** (vLLM's CPU build, the demo's tiny Llama with a "
             "4,096-token KV cache that holds 15 such requests, 2 cores; the real control "
             "plane, the process kubelet).", ""]
    for name, rec in stored:
        caps = rec["caps"]
        lines += [f"### `{name}` ({rec['label']}, {rec['time']}): cap {caps['adapted']} "
                  f"(adapted) against {caps['static']} (tuned, static)", ""]
        if rec.get("source"):
            lines += [f"Source: {rec['source']}.", ""]
        lines += ["| metric | adapted | static | verdict |", "|---|---|---|---|"]
        for row in rec["summary"]:
            fmt = FORMATS.get(row["metric"], "{:g}")
            lines.append(f"| {row['metric']} | {_cell(row['adapted'], fmt)} | "
                         f"{_cell(row['static'], fmt)} | {row['verdict']} |")
        order = "; ".join(
            f"{r['arm']} {r['preemptions']:.0f} preemptions, TTFT p95 {r['ttft_p95_ms']:,.0f} "
            f"ms, {r['goodput_rps']:.2f} req/s" for r in rec["rounds"])
        lines += ["", f"Rounds in order: {order}.", ""]
    lines.append(f"<!-- {SECTION}:end -->")
    return "\n".join(lines)


def write_results(page: Path = PAGE) -> None:
    text = page.read_text()
    block = render(runs())
    pattern = re.compile(rf"<!-- {SECTION}:begin -->.*?<!-- {SECTION}:end -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else \
        text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)


def main(argv: list[str]) -> int:
    if argv != ["--write-results"]:
        sys.stderr.write(__doc__ or "")
        return 2
    write_results()
    sys.stdout.write(f"wrote the {SECTION} section of {PAGE.relative_to(ROOT)} from "
                     f"{len(runs())} run(s)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
