"""JSON schemas the tests validate rendered objects against, kept as data files.

Each schema is one YAML file in ``tests/unit/data/schemas/`` (YAML so that a schema can
say in comments where its types, enums and bounds come from); ``load_schema(name)``
reads ``<name>.yaml`` and returns it as a plain dict for :mod:`jsonschema`. These cover
kinds that kubernetes-validate cannot know (custom resources such as the PodMonitor and
the LeaderWorkerSet); built-in kinds are validated through kubernetes-validate itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "unit" / "data" / "schemas"


def schema_names() -> list[str]:
    """The names ``load_schema`` accepts (file names without ``.yaml``), sorted."""
    return sorted(path.stem for path in SCHEMA_DIR.glob("*.yaml"))


def load_schema(name: str) -> dict[str, Any]:
    """The schema in ``tests/unit/data/schemas/<name>.yaml``, freshly read (a new dict
    on every call, so a caller may change its copy). Raises ``FileNotFoundError`` for an
    unknown name and ``ValueError`` when the file does not hold a mapping."""
    path = SCHEMA_DIR / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no schema {name!r} in {SCHEMA_DIR} (have: {schema_names()})")
    schema = yaml.safe_load(path.read_text())
    if not isinstance(schema, dict):
        raise ValueError(f"{path} does not hold a schema (a mapping at the top level)")
    return schema
