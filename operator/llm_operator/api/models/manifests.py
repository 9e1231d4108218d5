"""LLMService manifests read from YAML files (for the command line)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..constants import API_VERSION
from ..errors import InputError, SpecErrors
from .parsing import parse_llmservice
from .service import LLMService


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise InputError(path, "no such file", "check the path") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory",
                         "give the YAML files in it, e.g. DIR/*.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot be read ({exc.__class__.__name__}: {exc})",
                         "give a readable UTF-8 YAML file") from None


# The most values a document may expand to through YAML aliases (a "billion laughs"
# file of a few lines would otherwise take for ever to read).
YAML_MAX_VALUES = 1_000_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (as in
    kubectl's YAML reader) instead of the last value silently winning, and a document
    that aliases expand past :data:`YAML_MAX_VALUES` values is an error."""

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        sizes: dict[int, int] = {}

        def size(n: yaml.Node) -> int:
            if id(n) not in sizes:
                sizes[id(n)] = 0  # a recursive alias counts once
                children: list[yaml.Node] = []
                if isinstance(n, yaml.MappingNode):
                    children = [x for pair in n.value for x in pair]
                elif isinstance(n, yaml.SequenceNode):
                    children = list(n.value)
                sizes[id(n)] = 1 + sum(size(c) for c in children)
            return sizes[id(n)]

        if node is not None and size(node) > YAML_MAX_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand it to more than {YAML_MAX_VALUES:,} values",
                node.start_mark)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping (the first "
                    "value would be lost)", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _documents(path: str, text: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_UniqueKeyLoader))  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise InputError(path, "nests mappings or lists too deeply to be a manifest",
                         "give an LLMService manifest (a few levels deep)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"is not valid YAML{where}: {problem}",
                         "correct the YAML (e.g. check indentation and brackets there)") from None


def load_services(paths: Sequence[str]) -> Iterator[tuple[str, LLMService]]:
    """Yield every LLMService document in the given YAML files (other kinds are skipped).

    Raises :class:`InputError` for a file that is missing, is not YAML or holds no
    LLMService at all (naming the kinds it does hold), and :class:`SpecErrors` with
    ``source`` set to the file for an LLMService that does not parse.
    """
    for path in paths:
        kinds: list[str] = []
        for doc in _documents(path, _read(path)):
            if isinstance(doc, list):
                raise InputError(path, "holds a YAML list, not an LLMService manifest",
                                 "remove the leading '- ' and give each LLMService as its own "
                                 "document, separated by '---'")
            if doc is not None and not isinstance(doc, dict):
                kinds.append(f"a {type(doc).__name__} value, not a manifest")
                continue
            if doc is None:
                continue
            kind = doc.get("kind")
            if kind != "LLMService":
                kinds.append(str(kind) if kind else "(no kind)")
                continue
            if doc.get("apiVersion") != API_VERSION:
                raise InputError(path, f"LLMService {(doc.get('metadata') or {}).get('name')!r} "
                                 f"has apiVersion {doc.get('apiVersion')!r}",
                                 f"set `apiVersion: {API_VERSION}`")
            try:
                svc = parse_llmservice(doc)
            except SpecErrors as exc:
                exc.source = path
                raise
            kinds.append("LLMService")
            yield path, svc
        if "LLMService" not in kinds:
            found = f"found: {', '.join(sorted(set(kinds)))}" if kinds else "the file is empty"
            raise InputError(path, f"holds no LLMService ({found})",
                             "give a manifest with `apiVersion: llmops.dev/v1alpha1` and "
                             "`kind: LLMService`")
