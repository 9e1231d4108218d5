#!/usr/bin/env python3
"""Copy the canonical LLMService CRD into the Helm chart.

``crds/llmservices.llmops.dev.yaml`` is the one source of truth; the chart carries a
byte-identical copy at ``charts/llm-operator/files/llmservices.llmops.dev.yaml`` that
``templates/crd.yaml`` renders (so ``helm upgrade`` updates the CRD). The chart tests fail
when the two differ; run this script to bring the copy back in line.

Usage::

    python tools/sync_crd.py          # copy
    python tools/sync_crd.py --check  # exit 1 when the copy differs (for CI)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CANONICAL = REPO_ROOT / "crds" / "llmservices.llmops.dev.yaml"
CHART_COPY = REPO_ROOT / "charts" / "llm-operator" / "files" / "llmservices.llmops.dev.yaml"


def in_sync(canonical: Path = CANONICAL, copy: Path = CHART_COPY) -> bool:
    """True when the chart's copy exists and equals the canonical CRD byte for byte."""
    return copy.exists() and copy.read_bytes() == canonical.read_bytes()


def sync(canonical: Path = CANONICAL, copy: Path = CHART_COPY) -> bool:
    """Copy ``canonical`` to ``copy``; return True when the copy changed."""
    if in_sync(canonical, copy):
        return False
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(canonical.read_bytes())
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line entry: copy (or with --check, compare) the CRD."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args(argv)
    if not CANONICAL.exists():
        sys.stderr.write(f"error: {CANONICAL} does not exist\n")
        return 1
    rel_copy = CHART_COPY.relative_to(REPO_ROOT)
    if args.check:
        if in_sync():
            return 0
        sys.stderr.write(f"{rel_copy} differs from crds/; fix: python tools/sync_crd.py\n")
        return 1
    changed = sync()
    sys.stdout.write(f"{'updated' if changed else 'already in sync'}: {rel_copy}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
