"""The demo's binding-cap comparisons, stored and rendered (issue 57 item 5).

``bash tools/demo.sh`` runs the comparison registered in
``benchmarks/configs/demo_binding_cap.yaml`` (``llm_operator_sandbox.cap_effect``),
``bash tools/demo.sh --nodes`` the one in ``demo_binding_cap_nodes.yaml``; each writes a
run's record to ``/tmp/llmop-demo-plots/LABEL.json``, and a run kept for the record is
copied to ``benchmarks/data/demo_binding_cap[_nodes]/run_N.json``. This renders every
stored run into the ``demo-binding-cap`` and ``demo-binding-cap-nodes`` sections of
``benchmarks/results/adaptation.md``:

    .venv/bin/python -m benchmarks.demo_binding_cap --write-results
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from llm_operator_sandbox.cap_effect import CONFIG, METRICS, NODES_CONFIG

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "demo_binding_cap"
PAGE = ROOT / "benchmarks" / "results" / "adaptation.md"
SECTION = "demo-binding-cap"
NODES_SECTION = "demo-binding-cap-nodes"
# Each section: its stored runs and its registered config.
SECTIONS = {SECTION: (DATA, CONFIG),
            NODES_SECTION: (DATA.with_name("demo_binding_cap_nodes"), NODES_CONFIG)}


def runs(section: str = SECTION) -> list[tuple[str, dict[str, Any]]]:
    """The stored runs of a section, oldest first: (file name, record)."""
    files = sorted(SECTIONS[section][0].glob("run_*.json"),
                   key=lambda p: int(p.stem.split("_")[1]))
    return [(p.name, json.loads(p.read_text())) for p in files]


def _cell(s: dict[str, Any], fmt: str) -> str:
    return f"{fmt.format(s['mean'])} [{fmt.format(s['low'])}, {fmt.format(s['high'])}]"


FORMATS = {label: fmt for label, _, fmt, _ in METRICS}  # as the demo prints them


_NODES_INTRO = [
    "## The demo on real nodes: the adapted cap against the tuned static cap", "",
    "`bash tools/demo.sh` (`--nodes` before 2026-12-06), step 5: the same comparison with "
    "the engine in a real container, on a shorter load (32 clients, 32 requests of "
    "128 + 128 tokens) 4 times, "
    "interleaved (adapted, static, static, adapted). Registered before the first run in "
    "`benchmarks/configs/demo_binding_cap_nodes.yaml`. Each cell: the mean [lowest, "
    "highest] of an arm's 2 rounds. Stored: `benchmarks/data/demo_binding_cap_nodes/`.", "",
    "**Measured in real containers here** (Kubernetes' kubelet, containerd and runc; vLLM's "
    "CPU build in a container of the image built here, 1.5 CPUs; the wide-KV stand-in of "
    "`demo/tiny-llama-nodes.yaml`, whose 1 GiB KV cache holds 4,096 tokens, 15 such "
    "requests; the real control plane).", ""]


def render(stored: list[tuple[str, dict[str, Any]]], section: str = SECTION) -> str:
    """A section's markdown (pure)."""
    if section == NODES_SECTION:
        return _render(stored, section, _NODES_INTRO)
    return _render(stored, section, [
             "## The demo: the adapted cap against the tuned static cap, on the same load", "",
             "`bash tools/demo.sh --processes` (`bash tools/demo.sh` before 2026-12-06), "
             "step 5: after the adaptation has moved the cap, the same "
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
             "plane, the process kubelet).", ""])


def _render(stored: list[tuple[str, dict[str, Any]]], section: str, intro: list[str]) -> str:
    lines = [f"<!-- {section}:begin -->", *intro]
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
    lines.append(f"<!-- {section}:end -->")
    return "\n".join(lines)


def write_results(page: Path = PAGE) -> None:
    text = page.read_text()
    for section in SECTIONS:
        block = render(runs(section), section)
        pattern = re.compile(rf"<!-- {section}:begin -->.*?<!-- {section}:end -->", re.S)
        text = pattern.sub(lambda _, b=block: b, text) if pattern.search(text) else \
            text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)


def main(argv: list[str]) -> int:
    if argv != ["--write-results"]:
        sys.stderr.write(__doc__ or "")
        return 2
    write_results()
    for section in SECTIONS:
        sys.stdout.write(f"wrote the {section} section of {PAGE.relative_to(ROOT)} from "
                         f"{len(runs(section))} run(s)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
