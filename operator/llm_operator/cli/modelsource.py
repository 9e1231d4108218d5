"""Reading a model's own facts for ``llm-operator plan --model-config`` (the I/O edge).

Two sources, both ending in :func:`llm_operator.knowledge.modelfacts.facts_from_hf_config`:

- a local folder holding ``config.json`` and, where the checkpoint is sharded,
  ``model.safetensors.index.json`` (and modelopt's ``hf_quant_config.json``);
- the Hugging Face Hub, through ``huggingface_hub`` (the ``hub`` extra), at the spec's
  ``spec.model.revision``. ``HF_ENDPOINT`` (a mirror, or a test server) and ``HF_TOKEN``
  (gated models) are read from the environment by ``huggingface_hub`` itself; files are
  kept in its cache (``HF_HOME``), one copy per repository and commit, and this process
  reads each repository and revision once.

The same reads run inside the cluster as ``llm-operator facts`` (:func:`facts_command`),
the command of the operator's facts Job (:mod:`llm_operator.facts`): it prints the files
in the compact form of :mod:`llm_operator.facts.message` and writes them to its
termination message, where the operator reads them (docs/production/model-facts.md).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ..api.errors import InputError
from ..facts import message as fm
from ..knowledge.modelfacts import ModelFacts, facts_from_hf_config

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
QUANT = "hf_quant_config.json"

_READ: dict[tuple[str, str], ModelFacts] = {}
Files = tuple[Any, Any, Any]  # config.json, the safetensors index, hf_quant_config.json


class FetchError(InputError):
    """A read that failed, with its kind (:mod:`llm_operator.facts.message`: ``gated``,
    ``revision``, ...) and the Hub's HTTP status where it answered one."""

    def __init__(self, kind: str, source: str, problem: str, fix: str,
                 status: int | None = None) -> None:
        super().__init__(source, problem, fix)
        self.kind, self.status = kind, status


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


def folder_files(folder: str | Path) -> Files:
    """The three files of a model folder on disk (the index and quant config: None where
    absent). Raises :class:`FetchError` for a folder without ``config.json``."""
    root = Path(folder)
    if not (root / CONFIG).is_file():
        raise FetchError(fm.NO_CONFIG, f"--model-config {folder}", f"has no {CONFIG}",
                         "give the folder that holds the checkpoint (config.json next to the "
                         "*.safetensors files), or 'hub'")
    index = _load(root / INDEX) if (root / INDEX).is_file() else None
    quant = _load(root / QUANT) if (root / QUANT).is_file() else None
    return _load(root / CONFIG), index, quant


def facts_from_folder(folder: str | Path, name: str) -> ModelFacts:
    """Facts from a model folder on disk (``config.json``; the index where present)."""
    config, index, quant = folder_files(folder)
    return _facts(config, name, index, quant, str(Path(folder)))


def facts_from_hub(repo: str, revision: str | None) -> ModelFacts:
    """Facts of ``repo`` at ``revision`` (None: main) from the Hub (or ``HF_ENDPOINT``)."""
    key = (repo, revision or "main")
    if key in _READ:
        return _READ[key]
    config, index, quant, _commit = hub_files(repo, revision)
    facts = _facts(config, repo, index, quant, f"{repo}@{revision or 'main'}")
    _READ[key] = facts
    return facts


def hub_files(repo: str, revision: str | None) -> tuple[Any, Any, Any, str | None]:
    """The three files of ``repo`` at ``revision`` from the Hub, and the commit they were
    read at. Raises :class:`FetchError` naming the fix."""
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
    commits: list[str] = []

    def fetch(filename: str, required: bool) -> Any:
        try:
            # Read at each call, not at huggingface_hub's import: the endpoint, the token
            # and the cache folder the environment names now.
            path = hf_hub_download(repo, filename, revision=revision,
                                   endpoint=os.environ.get("HF_ENDPOINT") or None,
                                   token=os.environ.get("HF_TOKEN") or None,
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
        except GatedRepoError as exc:
            raise FetchError(fm.GATED, where, f"the repository is gated and the Hub refused "
                             f"{filename} ({_status(exc)})", "set HF_TOKEN to a token of an "
                             "account that accepted the model's licence",
                             _code(exc)) from exc
        except RevisionNotFoundError as exc:
            raise FetchError(fm.NO_REVISION, where, "the repository has no such revision",
                             "set spec.model.revision to a branch, tag or commit of the "
                             "repository", _code(exc)) from exc
        except RepositoryNotFoundError as exc:
            raise FetchError(fm.NO_REPOSITORY, where, "no such repository, or it is private "
                             "and HF_TOKEN is unset or has no access", "check "
                             "spec.model.name, or set HF_TOKEN", _code(exc)) from exc
        except EntryNotFoundError as exc:
            if required:
                raise FetchError(fm.NO_CONFIG, where, f"the repository has no {filename}",
                                 "give spec.model.architecture", _code(exc)) from exc
            return None
        except HfHubHTTPError as exc:
            code = _code(exc)
            raise FetchError(fm.GATED if code in (401, 403) else fm.HTTP, where,
                             f"the Hub answered {_status(exc)} for {filename}",
                             "check HF_ENDPOINT and HF_TOKEN, or give a local folder",
                             code) from exc
        # The Hub's cache keeps each file under snapshots/<commit>/.
        commits.append(Path(path).parent.name)
        return _load(Path(path))

    files = fetch(CONFIG, True), fetch(INDEX, False), fetch(QUANT, False)
    return (*files, commits[0] if commits else None)


def _code(exc: Exception) -> int | None:
    code = getattr(getattr(exc, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


def _status(exc: Exception) -> str:
    code = _code(exc)
    return f"HTTP {code}" if code else type(exc).__name__


def facts_command(source: str, repo: str, revision: str | None,
                  termination_log: str | None) -> int:
    """``llm-operator facts``: read the files (``source``: ``hub`` or a folder), check
    them with the parser, print them in the compact form of
    :mod:`llm_operator.facts.message` and write that to ``termination_log`` (the facts
    Job's termination message). A failure is written there too, with its kind and fix,
    and the exit code is 2; an unexpected exception (a bug) too, kind
    :data:`~llm_operator.facts.message.INTERNAL`, exit code 1."""
    try:
        if source == "hub":
            config, index, quant, commit = hub_files(repo, revision)
            where = f"{repo}@{revision or 'main'}"
        else:
            (config, index, quant), commit, where = folder_files(source), None, source
        _facts(config, repo, index, quant, where)  # refused here, with the key named
        text = fm.encode_facts(config, index, quant, source=where, commit=commit)
        code = 0
    except FetchError as exc:
        text, code = fm.encode_error(exc.kind, exc.source, exc.problem, exc.fix,
                                     exc.status), 2
    except InputError as exc:
        text, code = fm.encode_error(fm.INVALID, exc.source, exc.problem, exc.fix), 2
    except fm.MessageError as exc:
        text, code = fm.encode_error(fm.TOO_BIG, repo, str(exc),
                                     "give spec.model.architecture"), 2
    except Exception as exc:  # a bug: still a message the operator can show, not a bare exit
        text, code = fm.encode_error(
            fm.INTERNAL, repo, f"llm-operator facts failed ({type(exc).__name__}: {exc})",
            "give spec.model.architecture, and report this as a bug in llm-operator"), 1
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    if termination_log:
        Path(termination_log).write_text(text)
    return code
