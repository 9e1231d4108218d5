"""The vLLM release an image runs, read from its tag, and whether the live admission cap
works on it (issue 60; pure).

The table is ``data/live_cap_compat.json``, written by ``tools/check_live_cap_compat.py
--write`` from the static matrix (docs/production/live-admission-cap.md#vllm-releases):
per minor release, ``live`` (the scheduler reads ``max_num_active_reqs``), ``no-hook``
(the class would serve but could not move the cap live) or ``incompatible`` (the class
would stop the engine). A patch release takes its minor's row, which names the release
it was measured on.

A version is read only from the tag of an image whose repository name contains
``vllm`` (``vllm/vllm-openai:v0.32.0``, ``registry/team/vllm-cpu:0.33.1``), and only when
the tag is a release number (``v``, then two to four dot-separated numbers, optionally
``.postN``). Anything else (a digest-only reference, ``latest``, ``nightly``, a release
candidate, a tag with a suffix, another repository) is unknown, and so is a release the
table has no row for: the operator then keeps rendering the live cap as before, and the
runtime fallbacks (``EngineLacksHook``, ``SchedulerFailed``) still apply.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)?(?:\.post\d+)?$")


class LiveCapSupport(StrEnum):
    SUPPORTED = "Supported"  # the table says live
    UNSUPPORTED = "Unsupported"  # the table says no-hook or incompatible
    UNKNOWN = "Unknown"  # no version from the tag, or no row for it


@dataclass(frozen=True)
class ImageVersion:
    """What an image reference says of its vLLM release."""

    image: str
    version: str | None  # "0.32.0" (the tag without its "v"), None when unknown
    minor: str | None  # "0.32": the table's key
    why_unknown: str | None = None


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """``(repository, tag, digest)`` of an image reference, as the container runtime
    reads it: the tag follows the last ``:`` after the last ``/`` (a registry's port is
    not a tag), the digest follows ``@``."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1:], digest or None
    return name, None, digest or None


def image_vllm_version(image: str) -> ImageVersion:
    """The vLLM release ``image``'s tag names, or why it names none."""
    repo, tag, digest = split_image(image.strip())
    if "vllm" not in repo.rsplit("/", 1)[-1].lower():
        return ImageVersion(image, None, None,
                            f"its repository {repo} is not named like a vLLM image (no "
                            "'vllm' in its last part), so its tag is not read as vLLM's "
                            "version")
    if tag is None:
        return ImageVersion(image, None, None,
                            "it has no tag, only a digest" if digest else "it has no tag")
    m = _RELEASE_TAG.match(tag)
    if m is None:
        return ImageVersion(image, None, None,
                            f"its tag {tag} is not a vLLM release number (like v0.32.0)")
    return ImageVersion(image, tag.removeprefix("v"), f"{int(m[1])}.{int(m[2])}")


@dataclass(frozen=True)
class CompatTable:
    """The static matrix's verdicts, per minor release."""

    measured: str  # "statically from the published vllm wheels on DATE"
    releases: dict[str, tuple[str, str]]  # "0.32" -> (verdict, release checked)

    def supported(self) -> list[str]:
        """The minor releases the live cap works on, oldest first."""
        return sorted((k for k, (v, _) in self.releases.items() if v == "live"),
                      key=lambda k: tuple(int(x) for x in k.split(".")))


def table_from_json(raw: dict[str, Any]) -> CompatTable:
    return CompatTable(str(raw["measured"]),
                       {k: (str(v["verdict"]), str(v["checked"]))
                        for k, v in raw["releases"].items()})


@cache
def compat_table() -> CompatTable:
    """The committed table (``data/live_cap_compat.json``)."""
    return table_from_json(json.loads(
        resources.files("llm_operator.knowledge").joinpath("data/live_cap_compat.json").read_text()))


@dataclass(frozen=True)
class LiveCapVerdict:
    support: LiveCapSupport
    version: str | None
    message: str


_VERDICT_SAYS = {
    "no-hook": "whose scheduler has no max_num_active_reqs, so the admission cap cannot "
               "move live (the operator's scheduler class would serve and report "
               "llmop_admission_live 0)",
    "incompatible": "whose scheduler classes differ from what the operator's scheduler "
                    "class needs (it would stop the engine at start)",
}


def live_cap_verdict(image: str, field: str, table: CompatTable | None = None,
                     example: str | None = None) -> LiveCapVerdict:
    """Whether the live cap works on ``image`` (named by ``field``, e.g. ``spec.image``),
    with a message that says what was read, from where, and the fix when it does not
    (``example``: an image to suggest, used when the table says it works)."""
    table = table or compat_table()
    read = image_vllm_version(image)
    supported = table.supported()
    span = f"{supported[0]} to {supported[-1]}" if supported else "none"
    fallback = ("The live admission cap is rendered as for a supported vLLM; should the "
                "engine lack the hook or fail on the scheduler class, changes fall back to "
                "rollouts")
    if read.version is None or read.minor is None:
        return LiveCapVerdict(LiveCapSupport.UNKNOWN, None, (
            f"The vLLM version of {field} {image} is unknown: {read.why_unknown}. "
            f"{fallback}. The live cap supports vLLM {span} ({table.measured})"))
    row = table.releases.get(read.minor)
    if row is None:
        return LiveCapVerdict(LiveCapSupport.UNKNOWN, read.version, (
            f"{field} {image} runs vLLM {read.version} (its tag), which the live cap's "
            f"compatibility table does not cover (vLLM {', '.join(sorted(table.releases))}). "
            f"{fallback}"))
    verdict, checked = row
    if verdict == "live":
        return LiveCapVerdict(LiveCapSupport.SUPPORTED, read.version, (
            f"{field} {image} runs vLLM {read.version} (its tag), which the live cap "
            f"supports ({checked} checked {table.measured})"))
    says = _VERDICT_SAYS.get(verdict, f"which the table marks {verdict}")
    if example is None or live_cap_verdict(example, "", table).support is not (
            LiveCapSupport.SUPPORTED):
        example = f"vllm/vllm-openai:v{supported[-1]}.0" if supported else None
    use = (f"To move the cap live, use an image of vLLM {span} (e.g. {example}); to "
           if example else "To ")
    return LiveCapVerdict(LiveCapSupport.UNSUPPORTED, read.version, (
        f"{field} {image} runs vLLM {read.version} (its tag), {says} ({checked} checked "
        f"{table.measured}). The operator does not render its scheduler class: vLLM runs "
        f"its own scheduler and every change to --max-num-seqs rolls the pods. {use}"
        "keep this image without rollouts, set spec.adaptation.mode: Recommend "
        "(decisions only)"))
