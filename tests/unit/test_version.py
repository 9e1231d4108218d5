"""One version names a release (tools/check_version.py, which the release workflow runs
on its tag): pyproject.toml, the chart's version and appVersion, the package's
``__version__``, the default operator image's tag and CHANGELOG.md's newest version
heading agree, and each disagreement is found."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from llm_operator import __version__
from llm_operator.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_version", ROOT / "tools" /
                                                  "check_version.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_version"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


cv = _load()

PYPROJECT = '[project]\nname = "llm-operator"\nversion = "1.2.3"\n'
CHART = 'apiVersion: v2\nname: llm-operator\nversion: 1.2.3\nappVersion: "1.2.3"\n'
INIT = '"""llm-operator."""\n\n__version__ = "1.2.3"\n'
SETTINGS = 'operator_image: str = Field(\n    "ghcr.io/llmops-dev/llm-operator:1.2.3",\n'
CHANGELOG = ("# Changelog\n\n## [Unreleased]\n\n### Added\n\n- a thing\n\n"
             "## [1.2.3] - 2026-12-05\n\n### Fixed\n\n- that thing\n\n"
             "## [1.2.2] - 2026-11-01\n\n- before\n\n"
             "[Unreleased]: https://example.invalid/compare/v1.2.3...HEAD\n")


def written(**change: str) -> object:
    texts = {"pyproject": PYPROJECT, "chart": CHART, "package_init": INIT,
             "settings": SETTINGS, "changelog": CHANGELOG, **change}
    return cv.read(**texts)


def test_the_repository_names_one_version() -> None:
    w = cv.read_repository()
    assert cv.problems(w) == []
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "llm-operator" / "Chart.yaml").read_text())
    # The checker's reading agrees with a real parser of each file.
    assert w.pyproject == version == __version__
    assert str(chart["version"]) == str(chart["appVersion"]) == version
    assert Settings.model_fields["operator_image"].default.endswith(f":{version}")
    assert w.chart_version == str(chart["version"])
    assert w.chart_app_version == str(chart["appVersion"])
    assert cv.SEMVER.fullmatch(version)


def test_a_version_written_in_one_place_only_is_found() -> None:
    assert cv.problems(written()) == []
    assert cv.problems(written(), tag="v1.2.3") == []
    for change, where in (
        ({"chart": CHART.replace("version: 1.2.3", "version: 1.2.4")}, "Chart.yaml version"),
        ({"chart": CHART.replace('appVersion: "1.2.3"', "appVersion: 1.3.0")},
         "Chart.yaml appVersion"),
        ({"package_init": INIT.replace("1.2.3", "1.2.4")}, "__version__"),
        ({"settings": SETTINGS.replace("1.2.3", "1.2.0")}, "LLMOP_OPERATOR_IMAGE"),
        ({"changelog": CHANGELOG.replace("## [1.2.3] - 2026-12-05\n\n### Fixed\n\n"
                                         "- that thing\n\n", "")},
         "CHANGELOG.md's newest version is 1.2.2"),
    ):
        found = cv.problems(written(**change))
        assert len(found) == 1 and where in found[0], (where, found)


def test_the_changelog_keeps_its_form() -> None:
    no_unreleased = CHANGELOG.replace("## [Unreleased]\n\n### Added\n\n- a thing\n\n", "")
    assert any("'## [Unreleased]'" in p for p in cv.problems(written(changelog=no_unreleased)))
    undated = CHANGELOG.replace("## [1.2.3] - 2026-12-05", "## [1.2.3]")
    assert any("YYYY-MM-DD" in p for p in cv.problems(written(changelog=undated)))
    assert any("not a semantic version" in p
               for p in cv.problems(written(pyproject=PYPROJECT.replace("1.2.3", "1.2"),
                                            chart=CHART.replace("1.2.3", "1.2"),
                                            package_init=INIT.replace("1.2.3", "1.2"),
                                            settings=SETTINGS.replace("1.2.3", "1.2"))))


def test_a_tag_must_name_the_version_and_have_its_changelog_section() -> None:
    assert any("the tag v1.2.4 is not v1.2.3" in p
               for p in cv.problems(written(), tag="v1.2.4"))
    # Before the first release there is no version heading: fine, but not for a tag.
    first = CHANGELOG.split("## [1.2.3]")[0]
    assert cv.problems(written(changelog=first)) == []
    (found,) = cv.problems(written(changelog=first), tag="v1.2.3")
    assert "rename '## [Unreleased]' before tagging" in found


def test_the_release_notes_are_the_version_s_section() -> None:
    assert cv.release_notes(CHANGELOG, "1.2.3") == "### Fixed\n\n- that thing\n"
    assert cv.release_notes(CHANGELOG, "1.2.2") == "- before\n"
    assert cv.release_notes(CHANGELOG, "9.9.9") == ""
