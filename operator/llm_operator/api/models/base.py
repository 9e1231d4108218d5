"""The base of the spec's models, the error a validator raises with its fix, and the
path of a pydantic error in the manifest."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

Auto = Literal["auto"]
AutoInt = int | Auto


class _Model(BaseModel):
    """Base: camelCase aliases, unknown fields rejected, populate by either name; no
    NaN or infinity (YAML's .nan and .inf, which no JSON client can send either)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )


class FieldProblem(ValueError):
    """A validator's refusal that carries its own fix (``parse_llmservice`` reports both)."""

    def __init__(self, problem: str, fix: str, at: str = "") -> None:
        self.problem = problem
        self.fix = fix
        self.at = at  # a path below the validated field, e.g. "[1].name"
        super().__init__(problem)


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("int", "literal['auto']") or item.startswith(("literal[", "function-")):
            continue  # pydantic's union-branch markers: not part of the user's path
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)
