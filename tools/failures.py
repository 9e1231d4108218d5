"""Print each failed or errored test of the JUnit XML files given, one line each, with the
start of its message: the test command's last lines, so a CI log cut to its tail still
says what failed and why.

    python tools/failures.py LOGDIR/junit-*.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

WIDTH = 600  # characters of each message kept


def failures(paths: list[str]) -> list[str]:
    """``FAILURE|ERROR module::test: message`` for every failure and error in the files
    that exist."""
    lines = []
    for path in paths:
        if not Path(path).is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            for kind in ("failure", "error"):
                for node in case.findall(kind):
                    text = " ".join((node.get("message") or node.text or "").split())
                    name = f"{case.get('classname', '')}::{case.get('name', '')}"
                    lines.append(f"{kind.upper()} {name}: {text[:WIDTH]}")
    return lines


if __name__ == "__main__":
    found = failures(sys.argv[1:])
    print(f"\n==> failures and errors, in short: {len(found)}")  # noqa: T201
    for line in found:
        print(f"    {line}")  # noqa: T201
