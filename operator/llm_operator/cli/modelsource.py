"""Reading a model's own facts for ``llm-operator plan --model-config`` (the I/O edge).

Two sources, both ending in :func:`llm_operator.modelfacts.facts_from_hf_config`:

- a local folder holding ``config.json`` and, where the checkpoint is sharded,
  ``model.safetensors.index.json`` (and modelopt's ``hf_quant_config.json``);
- the Hugging Face Hub, through ``huggingface_hub`` (the ``hub`` extra), at the spec's
  ``spec.model.revision``. ``HF_ENDPOINT`` (a mirror, or a test server) and ``HF_TOKEN``
  (gated models) are read from the environment by ``huggingface_hub`` itself; files are
  kept in its cache (``HF_HOME``), one copy per repository and commit, and this process
  reads each repository and revision once.

The operator does not read the Hub itself yet: it plans from the catalog or
``spec.model.architecture`` (docs/concepts.md, "Where model facts come from").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..modelfacts import ModelFacts, facts_from_hf_config

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
QUANT = "hf_quant_config.json"

_READ: dict[tuple[str, str], ModelFacts] = {}


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(str(path), f"cannot be read as JSON ({exc})",
                         "give the model's own file, as the Hub serves it") from exc


def _facts(config: Any, name: str, index: Any, quant: Any, where: str) -> ModelFacts:
    if not isinstance(config, dict):
        raise InputError(where, "config.json is not a JSON object",
                         "give the model's own config.json")
    try:
        return facts_from_hf_config(config, name=name, index=index, hf_quant_config=quant)
    except ValueError as exc:
        problem, _, fix = str(exc).partition(": give ")
        raise InputError(where, problem, "give " + fix if fix else
                         "give spec.model.architecture") from exc


def facts_from_folder(folder: str | Path, name: str) -> ModelFacts:
    """Facts from a model folder on disk (``config.json``; the index where present)."""
    root = Path(folder)
    if not (root / CONFIG).is_file():
        raise InputError(f"--model-config {folder}", f"has no {CONFIG}",
                         "give the folder that holds the checkpoint (config.json next to the "
                         "*.safetensors files), or 'hub'")
    index = _load(root / INDEX) if (root / INDEX).is_file() else None
    quant = _load(root / QUANT) if (root / QUANT).is_file() else None
    return _facts(_load(root / CONFIG), name, index, quant, str(root))


def facts_from_hub(repo: str, revision: str | None) -> ModelFacts:
    """Facts of ``repo`` at ``revision`` (None: main) from the Hub (or ``HF_ENDPOINT``)."""
    key = (repo, revision or "main")
    if key in _READ:
        return _READ[key]
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:
        raise InputError("--model-config hub", "needs huggingface_hub, not installed",
                         "pip install 'llm-operator[hub]', or give a local folder") from exc
    where = f"{repo}@{revision or 'main'}"

    def fetch(filename: str, required: bool) -> Any:
        try:
            # Read at each call, not at huggingface_hub's import: the endpoint, the token
            # and the cache folder the environment names now.
            path = hf_hub_download(repo, filename, revision=revision,
                                   endpoint=os.environ.get("HF_ENDPOINT") or None,
                                   token=os.environ.get("HF_TOKEN") or None,
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
        except GatedRepoError as exc:
            raise InputError(where, f"the repository is gated and the Hub refused "
                             f"{filename} ({_status(exc)})", "set HF_TOKEN to a token of an "
                             "account that accepted the model's licence") from exc
        except RevisionNotFoundError as exc:
            raise InputError(where, "the repository has no such revision",
                             "set spec.model.revision to a branch, tag or commit of the "
                             "repository") from exc
        except RepositoryNotFoundError as exc:
            raise InputError(where, "no such repository, or it is private and HF_TOKEN is "
                             "unset or has no access", "check spec.model.name, or set "
                             "HF_TOKEN") from exc
        except EntryNotFoundError as exc:
            if required:
                raise InputError(where, f"the repository has no {filename}",
                                 "give spec.model.architecture") from exc
            return None
        except HfHubHTTPError as exc:
            raise InputError(where, f"the Hub answered {_status(exc)} for {filename}",
                             "check HF_ENDPOINT and HF_TOKEN, or give a local folder") from exc
        return _load(Path(path))

    facts = _facts(fetch(CONFIG, True), repo, fetch(INDEX, False), fetch(QUANT, False), where)
    _READ[key] = facts
    return facts


def _status(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return f"HTTP {code}" if code else type(exc).__name__
