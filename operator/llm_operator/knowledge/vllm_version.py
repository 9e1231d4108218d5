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

The table also says, per minor release, whether ``vllm serve`` takes
``--max-num-active-seqs`` (vLLM #56758; ``activeSeqsFlag``, read from the same wheels):
:func:`active_seqs_flag`. Where it does and the live cap is not in use, the operator
renders the active cap as that flag and keeps ``--max-num-seqs`` at the runner's capacity
(:func:`llm_operator.rendering.admission.uses_active_seqs_flag`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
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
    minor = release_minor(tag)
    if minor is None:
        return ImageVersion(image, None, None,
                            f"its tag {tag} is not a vLLM release number (like v0.32.0)")
    return ImageVersion(image, tag.removeprefix("v"), minor)


def release_minor(release: str) -> str | None:
    """The table's key (``"0.32"``) of a release number (``v0.32.0``, ``0.31.1.post1``;
    a ``+local`` suffix is ignored), or None when ``release`` is not one."""
    m = _RELEASE_TAG.match(release.split("+")[0])
    return f"{int(m[1])}.{int(m[2])}" if m else None


@dataclass(frozen=True)
class CompatTable:
    """The static matrix's verdicts, per minor release."""

    measured: str  # "statically from the published vllm wheels on DATE"
    releases: dict[str, tuple[str, str]]  # "0.32" -> (verdict, release checked)
    # "0.32" -> whether vllm serve takes --max-num-active-seqs (absent: not known)
    active_seqs: dict[str, bool] = field(default_factory=dict)

    def supported(self) -> list[str]:
        """The minor releases the live cap works on, oldest first."""
        return sorted((k for k, (v, _) in self.releases.items() if v == "live"),
                      key=lambda k: tuple(int(x) for x in k.split(".")))


def table_from_json(raw: dict[str, Any]) -> CompatTable:
    flags = {k: v["activeSeqsFlag"] for k, v in raw["releases"].items()
             if "activeSeqsFlag" in v}
    bad = sorted(k for k, v in flags.items() if not isinstance(v, bool))
    if bad:
        raise ValueError(f"releases.{bad[0]}.activeSeqsFlag in the live cap's compatibility "
                         f"table must be true or false, got {flags[bad[0]]!r}: re-run "
                         "tools/check_live_cap_compat.py --write")
    return CompatTable(str(raw["measured"]),
                       {k: (str(v["verdict"]), str(v["checked"]))
                        for k, v in raw["releases"].items()}, flags)


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


def _row_says(row: tuple[str, str], table: CompatTable) -> str:
    """What a row of the table says of the live cap, and where it was read."""
    verdict, checked = row
    says = ("which the live cap supports" if verdict == "live" else
            _VERDICT_SAYS.get(verdict, f"which the table marks {verdict}"))
    return f"{says} ({checked} checked {table.measured})"


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
    if row[0] == "live":
        return LiveCapVerdict(LiveCapSupport.SUPPORTED, read.version, (
            f"{field} {image} runs vLLM {read.version} (its tag), "
            f"{_row_says(row, table)}"))
    if example is None or live_cap_verdict(example, "", table).support is not (
            LiveCapSupport.SUPPORTED):
        example = f"vllm/vllm-openai:v{supported[-1]}.0" if supported else None
    use = (f"To move the cap live, use an image of vLLM {span} (e.g. {example}); to "
           if example else "To ")
    return LiveCapVerdict(LiveCapSupport.UNSUPPORTED, read.version, (
        f"{field} {image} runs vLLM {read.version} (its tag), {_row_says(row, table)}"
        ". The operator does not render its scheduler class: vLLM runs "
        f"its own scheduler and every change to --max-num-seqs rolls the pods. {use}"
        "keep this image without rollouts, set spec.adaptation.mode: Recommend "
        "(decisions only)"))


ACTIVE_SEQS_FLAG = "--max-num-active-seqs"


@dataclass(frozen=True)
class ActiveSeqsFlag:
    """Whether the image's ``vllm serve`` takes ``--max-num-active-seqs``, and why it is
    known: True only where the image's tag names a release whose table row says so."""

    present: bool
    version: str | None
    message: str


def active_seqs_flag(image: str, field: str = "spec.image",
                     table: CompatTable | None = None) -> ActiveSeqsFlag:
    """Whether ``image`` (named by ``field``) runs a vLLM with ``--max-num-active-seqs``
    (vLLM #56758), from its tag and the table's ``activeSeqsFlag``. An unknown version, a
    release the table has no row for, or a row without the fact: False (the operator
    keeps rendering the cap as ``--max-num-seqs``)."""
    table = table or compat_table()
    read = image_vllm_version(image)
    if read.version is None or read.minor is None:
        return ActiveSeqsFlag(False, None, (
            f"the vLLM version of {field} {image} is unknown ({read.why_unknown}), so the "
            f"cap is rendered as --max-num-seqs, which every vLLM takes"))
    row = table.releases.get(read.minor)
    has = table.active_seqs.get(read.minor)
    if row is None or has is None:
        return ActiveSeqsFlag(False, read.version, (
            f"{field} {image} runs vLLM {read.version}, for which the compatibility table "
            "does not say whether vllm serve takes --max-num-active-seqs, so the cap is "
            "rendered as --max-num-seqs"))
    checked = row[1]
    if not has:
        return ActiveSeqsFlag(False, read.version, (
            f"{field} {image} runs vLLM {read.version}, whose vllm serve has no "
            f"--max-num-active-seqs ({checked} checked {table.measured}), so the cap is "
            "rendered as --max-num-seqs"))
    return ActiveSeqsFlag(True, read.version, (
        f"{field} {image} runs vLLM {read.version}, whose vllm serve takes "
        f"--max-num-active-seqs ({checked} checked {table.measured})"))


def reported_version_note(tag_version: str | None, reported: tuple[str, ...] | None,
                          table: CompatTable | None = None) -> str | None:
    """What the engines' own report of their vLLM release (``llmop_engine_vllm_info``, set
    by the live cap's scheduler class) adds to what the image's tag said (pure): the
    release and the table's verdict where the tag named none, a warning where the two
    disagree or the replicas differ; None where nothing reports or the report matches
    the tag."""
    if not reported:
        return None
    table = table or compat_table()
    metric = "llmop_engine_vllm_info"  # inpod.engine.cap.METRIC_VLLM_INFO (no import: layers)
    if len(reported) > 1:
        return (f"The engines report different vLLM releases ({', '.join(reported)}; "
                f"{metric}): the replicas run different images, so a cap change may "
                "act differently on each")
    release = reported[0]
    if tag_version is not None and release.split("+")[0] == tag_version:
        return None
    minor = release_minor(release)
    row = table.releases.get(minor) if minor else None
    verdict = ("which the live cap's compatibility table does not cover" if row is None
               else _row_says(row, table))
    if tag_version is None:
        return f"The engines report vLLM {release} ({metric}), {verdict}"
    return (f"The image's tag says vLLM {tag_version}, but its engines report vLLM {release} "
            f"({metric}), {verdict}: the tag does not name the release inside the image. "
            "Fix: tag the image with the vLLM release it contains")
