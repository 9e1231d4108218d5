#!/usr/bin/env python3
"""The one version of a release, checked where it is written (standard library only).

One semantic version names a release: ``pyproject.toml``'s ``project.version``, the
chart's ``version`` and ``appVersion`` (``charts/llm-operator/Chart.yaml``; the chart's
default image tag is its appVersion), ``llm_operator.__version__`` (the operator's
User-Agent), the tag of the operator's default image (``LLMOP_OPERATOR_IMAGE``'s default in
``llm_operator/settings.py``) and the newest version heading of ``CHANGELOG.md``,
``## [X.Y.Z] - YYYY-MM-DD``, below ``## [Unreleased]`` (none before the first release).

    python3 tools/check_version.py              # prints the version; exit 1 on a mismatch
    python3 tools/check_version.py --tag v1.2.3 # and the tag names it, and CHANGELOG.md
                                                # has its heading (the release workflow)
    python3 tools/check_version.py --notes      # CHANGELOG.md's section of the version

The unit tier runs the same checks (tests/unit/test_version.py).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where the version is written, relative to the repository's root.
PYPROJECT = "pyproject.toml"
CHART = "charts/llm-operator/Chart.yaml"
PACKAGE_INIT = "operator/llm_operator/__init__.py"
SETTINGS = "operator/llm_operator/settings.py"
CHANGELOG = "CHANGELOG.md"

# Semantic Versioning 2.0.0's grammar (its regular expression, without build metadata,
# which neither a chart nor a Python package keeps apart from the version).
_PRE = r"(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"  # one pre-release identifier
SEMVER = re.compile(rf"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-{_PRE}(?:\.{_PRE})*)?")
_CHART_FIELD = re.compile(r'^(version|appVersion):\s*"?([^"\s#]+)"?\s*(?:#.*)?$', re.M)
_INIT_VERSION = re.compile(r'^__version__\s*=\s*"([^"]+)"', re.M)
_OPERATOR_IMAGE = re.compile(r'"ghcr\.io/llmops-dev/llm-operator:([^"]+)"')
_HEADING = re.compile(r"^## \[([^\]]+)\](.*)$", re.M)
_RELEASED = re.compile(r" - \d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Written:
    """Each place's version (None: not found there)."""

    pyproject: str | None
    chart_version: str | None
    chart_app_version: str | None
    package: str | None
    operator_image_tag: str | None
    changelog_headings: tuple[tuple[str, str], ...]  # (name, rest of the line), in order


def read(pyproject: str, chart: str, package_init: str, settings: str,
         changelog: str) -> Written:
    """The versions written in the five files' texts."""
    fields = dict(_CHART_FIELD.findall(chart))
    init = _INIT_VERSION.search(package_init)
    image = _OPERATOR_IMAGE.search(settings)
    return Written(
        pyproject=tomllib.loads(pyproject).get("project", {}).get("version"),
        chart_version=fields.get("version"),
        chart_app_version=fields.get("appVersion"),
        package=init.group(1) if init else None,
        operator_image_tag=image.group(1) if image else None,
        changelog_headings=tuple((m.group(1), m.group(2)) for m in _HEADING.finditer(changelog)))


def read_repository(root: Path = ROOT) -> Written:
    return read(*((root / f).read_text()
                  for f in (PYPROJECT, CHART, PACKAGE_INIT, SETTINGS, CHANGELOG)))


def release_notes(changelog: str, version: str) -> str:
    """The body of ``## [version]`` in CHANGELOG.md (up to the next version heading or
    link reference list); empty when there is no such heading."""
    lines = changelog.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith(f"## [{version}]")), None)
    if start is None:
        return ""
    body: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("## [") or re.match(r"^\[[^\]]+\]: ", line):
            break
        body.append(line)
    return "\n".join(body).strip() + "\n"


def problems(w: Written, tag: str | None = None) -> list[str]:
    """What disagrees, one sentence each naming the file; empty when all agree."""
    out: list[str] = []
    version = w.pyproject
    if version is None:
        return ["pyproject.toml has no project.version"]
    if not SEMVER.fullmatch(version):
        out.append(f"pyproject.toml's version {version!r} is not a semantic version X.Y.Z")
    for where, got in (("charts/llm-operator/Chart.yaml version", w.chart_version),
                       ("charts/llm-operator/Chart.yaml appVersion", w.chart_app_version),
                       ("operator/llm_operator/__init__.py __version__", w.package),
                       ("the default LLMOP_OPERATOR_IMAGE's tag (llm_operator/settings.py)",
                        w.operator_image_tag)):
        if got != version:
            out.append(f"{where} is {got!r}, pyproject.toml's version {version!r}")
    names = [name for name, _ in w.changelog_headings]
    if not names or names[0] != "Unreleased":
        out.append("CHANGELOG.md's first version heading must be '## [Unreleased]'")
    released = [(name, rest) for name, rest in w.changelog_headings if name != "Unreleased"]
    for name, rest in released:
        if not SEMVER.fullmatch(name) or not _RELEASED.fullmatch(rest):
            out.append(f"CHANGELOG.md heading '## [{name}]{rest}' is not "
                       "'## [X.Y.Z] - YYYY-MM-DD'")
    if released and released[0][0] != version:
        out.append(f"CHANGELOG.md's newest version is {released[0][0]}, pyproject.toml's "
                   f"version {version!r}: bump them together")
    if tag is not None:
        if tag != f"v{version}":
            out.append(f"the tag {tag} is not v{version}, the version pyproject.toml, the "
                       "chart and the image name")
        if not released or released[0][0] != version:
            out.append(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' heading as its "
                       "newest version: rename '## [Unreleased]' before tagging")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", help="the git tag being released (vX.Y.Z)")
    p.add_argument("--notes", action="store_true",
                   help="print CHANGELOG.md's section of the version, not the version")
    args = p.parse_args(argv)
    written = read_repository()
    found = problems(written, args.tag)
    for line in found:
        sys.stderr.write(f"error: {line}\n")
    if found:
        return 1
    assert written.pyproject is not None
    if args.notes:
        sys.stdout.write(release_notes((ROOT / CHANGELOG).read_text(), written.pyproject))
    else:
        sys.stdout.write(f"{written.pyproject}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
