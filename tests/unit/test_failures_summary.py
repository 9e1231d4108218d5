"""The test command's last lines name each failed test and why (tools/failures.py): CI
logs are often read cut to their tail, where pytest's own summary is long gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_a_failed_test_and_its_first_line_end_the_log(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(
        "def test_passes():\n    assert True\n\n"
        "def test_fails():\n    assert 2 + 2 == 5, 'decision: kept the defaults\\nthe table'\n")
    xml = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", str(tmp_path / "test_two.py")],
                   capture_output=True, cwd=tmp_path, check=False)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "failures.py"), str(xml),
                          str(tmp_path / "missing.xml")],
                         capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[0] == "==> failures and errors, in short: 1"
    (line,) = lines[1:]
    assert "test_two::test_fails" in line and "decision: kept the defaults" in line
    assert "test_passes" not in out
