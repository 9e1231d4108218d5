"""The ``vllm serve`` command line as vLLM's own parser reads it (pure, standard library).

The option table of the vLLM release the default image runs
(``data/vllm_serve_flags.json``, written by ``tools/vllm_flags.py`` from vLLM's parser
and checked against it by the vLLM tier) and argparse's rules over it: unique prefixes of
long options, underscores for dashes, the ``=`` form, attached short values (``-tp2``)
and vLLM's own rewrites (``-O3``, dotted keys of JSON options such as
``--speculative-config.method ngram``).

:func:`read_args` turns a list of arguments into what vLLM's ``EngineArgs`` would hold
(destination -> value) with the item each value came from, so that the start-up rules
(:mod:`llm_operator.knowledge.engine_rules`) can be checked on exactly what a pod runs. Imports
nothing of the operator: the tuner, which runs in the vLLM image, uses it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

# argparse's test for an item that is a negative number (a value, not a flag).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")

Arity = int | str  # as argparse's nargs: 0, 1, n, "?", "+" or "*"


@dataclass(frozen=True)
class Flag:
    """One option of ``vllm serve``: where its value goes, how many values it takes, and
    whether giving it again adds to it (an append action) rather than replacing it."""

    dest: str
    arity: Arity
    appends: bool = False

    @property
    def takes_value(self) -> bool:
        return self.arity != 0

    def wants_more(self, given: int) -> bool:
        """Whether argparse would take another value after ``given`` of them."""
        if isinstance(self.arity, int):
            return given < self.arity
        return self.arity in ("+", "*") or (self.arity == "?" and given == 0)

    def short_of(self, given: int) -> bool:
        """Whether ``given`` values are too few (argparse: expected ... argument)."""
        if isinstance(self.arity, int):
            return given < self.arity
        return self.arity == "+" and given == 0


@dataclass(frozen=True)
class FlagTable:
    """The options of ``vllm serve``: option string -> its :class:`Flag`."""

    vllm_version: str
    options: dict[str, Flag]

    def resolve(self, option: str) -> tuple[str | None, list[str]]:
        """The option string argparse picks for ``option`` (exact, or the one option it
        is a unique prefix of), else None with the candidates (several: ambiguous)."""
        if option in self.options:
            return option, []
        if option.startswith("--"):
            matches = [o for o in self.options if o.startswith(option)]
        else:  # argparse: "-n5" is "-n" with the value 5; "-d" prefixes "-dp", "-dcp"...
            if option[:2] in self.options and len(option) > 2:
                return option[:2], []
            matches = [o for o in self.options if o.startswith(option)]
        if len(matches) == 1:
            return matches[0], []
        return None, matches

    def switch_value(self, option: str) -> bool:
        """The value a switch sets: False for the ``--no-X`` of a ``--X`` with the same
        destination (argparse's BooleanOptionalAction), True otherwise."""
        if option.startswith("--no-"):
            positive = self.options.get("--" + option[len("--no-"):])
            return not (positive is not None and positive.dest == self.options[option].dest)
        return True


@cache
def flag_table() -> FlagTable:
    """The committed option table of the default image's ``vllm serve``."""
    raw: dict[str, Any] = json.loads(
        resources.files("llm_operator.knowledge").joinpath("data/vllm_serve_flags.json").read_text())
    return FlagTable(
        vllm_version=raw["vllm"],
        options={k: Flag(v["dest"], v["arity"], bool(v["appends"]))
                 for k, v in raw["options"].items()})


def is_value(item: str) -> bool:
    """Whether argparse reads ``item`` as a value rather than an option: it does not
    start with a dash, or is a lone dash or a negative number. (argparse also reads an
    item like ``"--x 5"`` as a value; the check refuses such items on their own.)"""
    return not item.startswith("-") or item == "-" or bool(_NEGATIVE_NUMBER.match(item))


def vllm_spelling(args: Sequence[str]) -> list[str]:
    """The items as vLLM rewrites them before its parser sees them, one for one: ``-O3``
    and ``-O=3`` are ``--optimization-level=3``, and ``-O`` before a level is
    ``--optimization-level``."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("-O") and arg != "-O":
            out.append("--optimization-level=" + (arg[3:] if arg[2] == "=" else arg[2:]))
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def normalize_key(key: str) -> str:
    """vLLM's preprocessing of a ``--key``: underscores become dashes up to the first
    dot; a dotted key (``--compilation-config.mode``) sets the option before the dot."""
    if not key.startswith("--"):
        return key
    head = key[2:].split(".", 1)[0]
    return "--" + head.replace("_", "-")


# --------------------------------------------------------------------------- reading


@dataclass
class ReadArgs:
    """What vLLM's parser makes of a list of arguments: ``values`` by destination (an
    ``EngineArgs`` field: ``max_num_seqs``, ``speculative_config``...), ``at`` the index
    of the item that set each one (for a JSON option built from dotted keys, the last
    such item, and ``option.key`` that of each key's), and ``option`` the option string
    it was set with."""

    values: dict[str, Any] = field(default_factory=dict)
    at: dict[str, int] = field(default_factory=dict)
    option: dict[str, str] = field(default_factory=dict)


def _json_or_text(text: str) -> Any:
    """A dotted key's value as vLLM reads it: JSON if it parses, else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _merge(into: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        nested = into.get(key)
        if not isinstance(nested, dict):
            nested = into[key] = {}
        into = nested
    into[keys[-1]] = value


def read_args(argv: Sequence[str], table: FlagTable | None = None) -> ReadArgs:
    """Read ``argv`` (flags only, no positional model) as ``vllm serve`` reads it: each
    flag takes as many following values as its arity allows, the last value given wins
    (an append action collects a list), a switch is True (False for ``--no-X``), a JSON
    option's text is decoded, and dotted keys (``--speculative-config.method ngram``)
    build one JSON object per option that replaces one given whole, as vLLM appends it
    after every other argument. Items the table does not know, and stray values, are
    skipped: :func:`llm_operator.knowledge.extra_args.check_extra_args` refuses them first."""
    table = table or flag_table()
    args = vllm_spelling(argv)
    out = ReadArgs()
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if is_value(arg):
            continue
        key, eq, inline = arg.partition("=")
        head, dot, path = key.partition(".")
        option, _ = table.resolve(normalize_key(head) if head.startswith("--") else head)
        if option is None:
            continue
        flag = table.options[option]
        if dot:  # --config-option.key[.key...] VALUE (or =VALUE)
            if not eq:
                if i >= len(args):
                    break
                inline, i = args[i], i + 1
            keys = path.split(".")
            text = json.dumps(inline.split(",")) if keys[-1].endswith("+") else inline
            keys[-1] = keys[-1].rstrip("+")
            _merge(dotted.setdefault(flag.dest, {}), keys, _json_or_text(text))
            at = i - (1 if eq else 2)
            out.at[flag.dest] = out.at[f"{flag.dest}.{keys[0]}"] = at
            out.option[flag.dest] = option
            continue
        attached = (not key.startswith("--") and len(key) > len(option) == 2)
        given: list[str] = []
        if eq:
            given = [inline]
        elif attached:
            given = [key[len(option):]]
        else:
            while i < len(args) and flag.wants_more(len(given)) and is_value(args[i]):
                given.append(args[i])
                i += 1
        value: Any
        if not flag.takes_value:
            value = table.switch_value(option)
        elif flag.arity in ("+", "*") or (isinstance(flag.arity, int) and flag.arity > 1):
            value = given
        else:
            value = given[0] if given else None
        if flag.appends:
            value = [*out.values.get(flag.dest, []), *(given or [value])]
        elif isinstance(value, str) and value[:1] in "{[":
            value = _json_or_text(value)
        out.values[flag.dest] = value
        out.at[flag.dest] = i - 1 - len(given) if not (eq or attached) else i - 1
        out.option[flag.dest] = option
    for dest, obj in dotted.items():
        out.values[dest] = obj
    return out
