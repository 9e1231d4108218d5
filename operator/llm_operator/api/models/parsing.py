"""A custom resource body parsed into an :class:`LLMService`, every invalid field named
with its fix; and the applied fields the API server dropped."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ..errors import SpecError, SpecErrors
from .base import FieldProblem, _loc_to_path
from .formats import PATTERN_HELP
from .service import NAME_MAX, LLMService


def parse_llmservice(body: Mapping[str, Any]) -> LLMService:
    """Parse a custom resource body into a typed :class:`LLMService`.

    Raises :class:`SpecErrors` naming every invalid field by its path in the manifest
    (``spec.engine.maxNumSeqs``) with a fix.
    """
    too_big = list(ints_beyond_int64(body.get("spec"), "spec"))
    if too_big:
        raise SpecErrors([SpecError(path, f"{_shown(value)} is beyond a 64-bit integer, which "
                                    "is all the API server accepts", "give a realistic value")
                          for path, value in too_big])
    try:
        return LLMService.model_validate(
            {"metadata": body.get("metadata") or {}, "spec": body.get("spec") or {}}
        )
    except ValidationError as exc:
        errors: list[SpecError] = []
        seen: set[str] = set()
        for err in exc.errors():
            path = _loc_to_path(tuple(err["loc"]))
            if path in seen:  # a union reports one error per branch; say it once
                continue
            seen.add(path)
            if err["type"] == "extra_forbidden":
                errors.append(
                    SpecError(path, "unknown field", "remove it or check its spelling "
                              "(`kubectl explain llmservice.spec` lists the fields)")
                )
            elif err["type"] == "missing":
                errors.append(SpecError(path, "is required", "set it"))
            elif path == "spec.model.name" and err["type"] == "string_pattern_mismatch":
                errors.append(SpecError(
                    path, f"{err.get('input')!r} is not a Hugging Face model id",
                    "give the id as on huggingface.co, e.g. meta-llama/Llama-3.1-8B-Instruct "
                    "(letters, digits, '.', '_', '-', one '/')"))
            elif path == "metadata.name":
                errors.append(SpecError(
                    path, f"{err.get('input')!r} cannot name the service's Deployment, "
                    "Service and labels", f"rename it: at most {NAME_MAX} characters, "
                    "lowercase letters, digits and '-', starting with a letter and ending "
                    "with a letter or digit"))
            elif isinstance((err.get("ctx") or {}).get("error"), FieldProblem):
                problem = err["ctx"]["error"]
                errors.append(SpecError(path + problem.at, problem.problem, problem.fix))
            elif err["type"] == "string_pattern_mismatch" and \
                    (err.get("ctx") or {}).get("pattern") in PATTERN_HELP:
                errors.append(SpecError(path, f"{_shown(err.get('input'))} is not "
                                        + PATTERN_HELP[err["ctx"]["pattern"]].split(":")[0],
                                        "give " + PATTERN_HELP[err["ctx"]["pattern"]]))
            else:
                ctx = err.get("ctx") or {}
                bound = {"less_than_equal": f"give at most {ctx.get('le')}",
                         "less_than": f"give less than {ctx.get('lt')}",
                         "greater_than_equal": f"give at least {ctx.get('ge')}",
                         "greater_than": f"give more than {ctx.get('gt')}",
                         "string_too_long": f"shorten it to {ctx.get('max_length')} "
                                            "characters or fewer"}.get(err["type"])
                errors.append(
                    SpecError(path, f"{err['msg']} (got {_shown(err.get('input'))})",
                              bound or _number_fix(path, err.get("input"))
                              or "use a value the CRD describes for this field")
                )
        raise SpecErrors(errors) from None


def _number_fix(path: str, given: Any) -> str | None:
    """The fix for a number written as text with a unit (``"25%"``, ``"2m"``, ``"2s"``):
    the field's unit is in its name, and it takes a bare number."""
    if not isinstance(given, str):
        return None
    field = path.rpartition(".")[2]
    text = given.strip()
    if text.lower() == "auto":
        return f"write {field}: auto, in lower case (or a whole number)"
    if text.endswith("%"):
        return (f"give {field} as a count, e.g. 1, without quotes (percentages are not "
                "supported)")
    unit = next((u for suffix, u in (("Seconds", "seconds"), ("Minutes", "minutes"),
                                     ("Ms", "milliseconds")) if field.endswith(suffix)), None)
    if unit and re.match(r"^[0-9.]+\s*[a-z]+$", text):
        return f"give {field} as a bare number of {unit}, without quotes or a unit"
    return None


def ints_beyond_int64(value: Any, path: str) -> Iterator[tuple[str, int]]:
    """Integers in a body that no Kubernetes client can send (outside int64)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        yield path, value
    elif isinstance(value, Mapping):
        for key, sub in value.items():
            yield from ints_beyond_int64(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from ints_beyond_int64(sub, f"{path}[{i}]")


def _shown(value: Any, limit: int = 80) -> str:
    """A user's value for a message: its repr, cut short when long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _missing(given: Any, stored: Any, path: str) -> Iterator[str]:
    if isinstance(given, Mapping) and isinstance(stored, Mapping):
        for key, value in given.items():
            sub = f"{path}.{key}"
            if key not in stored:
                yield sub
            else:
                yield from _missing(value, stored[key], sub)
    elif isinstance(given, list) and isinstance(stored, list) and len(given) == len(stored):
        for i, (g, s) in enumerate(zip(given, stored, strict=True)):
            yield from _missing(g, s, f"{path}[{i}]")


def dropped_fields(body: Mapping[str, Any]) -> list[str]:
    """Fields of the spec the user applied that the API server dropped (pruned as
    unknown, which clients without strict field validation do not report), found by
    comparing the stored spec with kubectl's last-applied configuration (set by
    ``kubectl apply`` and by tools that apply the same way, e.g. Argo CD's default).
    Empty when there is no such annotation: Helm and server-side apply keep none."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    try:
        last = json.loads(annotations.get(LAST_APPLIED) or "{}")
    except ValueError:
        return []
    if not isinstance(last, Mapping):
        return []
    return list(_missing(last.get("spec"), body.get("spec") or {}, "spec"))


def dropped_message(dropped: Sequence[str]) -> str:
    """One line for status and an Event: which applied fields the API server dropped."""
    return (f"the API server dropped unknown field(s) {', '.join(dropped)} of the applied "
            "spec (misspelt, or not in this CRD version): check the spelling against "
            "`kubectl explain llmservice.spec`, and apply with --validate=strict to be "
            "told at once")
