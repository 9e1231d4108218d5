"""The pages a user installs from agree with each other (issue 59 item 2).

Every ``helm install`` of the chart in the README, CONTRIBUTING.md, the chart's README and
NOTES.txt, docs/ and tools/push_image.sh uses one release name and one namespace; none
tells the user to ``kubectl apply -f examples/`` as a whole (five GPU types, Secrets and
claims at once: each example's header lists what it needs); no page title cites an issue.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE = NAMESPACE = "llm-operator"


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "tools" / "push_image.sh",
             ROOT / "charts" / "llm-operator" / "README.md",
             ROOT / "charts" / "llm-operator" / "templates" / "NOTES.txt"]
    return pages + sorted((ROOT / "docs").rglob("*.md"))


def _commands(text: str) -> list[str]:
    """Shell lines with their backslash continuations joined (a script's ``\\\\`` too)."""
    return re.sub(r"\\{1,2}\n\s*", " ", text).splitlines()


def test_every_helm_install_of_the_chart_uses_one_release_and_namespace() -> None:
    found = []
    for page in _pages():
        for line in _commands(page.read_text()):
            m = re.search(r"helm install (\S+) charts/llm-operator\b(.*)", line)
            if not m:
                continue
            ns = re.search(r"(?:-n|--namespace)[ =](\S+)", m.group(2))
            where = f"{page.relative_to(ROOT)}: {line.strip()}"
            assert m.group(1) == RELEASE, f"release {m.group(1)!r}, not {RELEASE!r}: {where}"
            assert ns and ns.group(1) == NAMESPACE, f"namespace is not {NAMESPACE}: {where}"
            assert "--create-namespace" in m.group(2), where
            found.append(where)
    assert len(found) >= 3, found  # the README, the chart's README, push_image.sh


def test_no_page_applies_every_example_at_once() -> None:
    for page in _pages():
        for line in _commands(page.read_text()):
            assert not re.search(r"kubectl apply\b.*-f\s+examples/?(\s|$|`)", line), (
                f"{page.relative_to(ROOT)} applies the whole examples/ folder: {line.strip()}")


def test_no_page_title_cites_an_issue() -> None:
    for page in _pages():
        if page.suffix != ".md":
            continue
        for line in page.read_text().splitlines():
            if line.startswith("#"):
                assert not re.search(r"\bissues? \d", line, re.IGNORECASE), (
                    f"{page.relative_to(ROOT)}: {line}")
