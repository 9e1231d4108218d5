"""The operator's decisions on a model's facts (pure): whether a service needs them read,
what the cache holds, what a finished facts Job said, and what to tell the user.

The cache is the ConfigMap :data:`CACHE_CONFIGMAP` in the service's namespace, one key per
source (:func:`~.job.facts_key`: repository and revision, or claim and folder), holding the
Job's message as it came (:mod:`.message`) with the commit it was read at. A ConfigMap,
not ``status``: it survives a restart of the operator as status does, but it is shared by
every service of the namespace that serves the same model (once cached, one read serves
them all; each service starts its own Job only while the source is not cached yet) and
it keeps the files out of ``status``, which every watcher of LLMServices
receives. Per namespace, not cluster-wide: the facts of a gated model were read with that
namespace's token and are not handed to another namespace that has none.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.models import LLMService, LLMServiceSpec
from ..api.timestamps import parse_rfc3339_or_none
from ..knowledge.catalog import lookup_model
from ..knowledge.modelfacts import ModelFacts, facts_from_hf_config
from ..tuning.observed import ObservedJob, PendingPod
from . import message as fm
from .job import ACTIVE_DEADLINE_SECONDS, TTL_SECONDS_AFTER_FINISHED, facts_key

CACHE_CONFIGMAP = "llm-operator-model-facts"
# A failed read is tried again this long after it ended (a token put right in its Secret,
# a Hub that was down); a new spec.model.name or revision is a new source, read at once.
RETRY_SECONDS = float(TTL_SECONDS_AFTER_FINISHED)  # the Job's deletion by its TTL

def needs_facts(spec: LLMServiceSpec) -> bool:
    """Whether the plan needs the model's own config.json: no ``spec.model.architecture``
    and a model the built-in catalog does not know."""
    return spec.model.architecture is None and lookup_model(spec.model.name) is None


def cache_key(key: str) -> str:
    """The ConfigMap key of a source (ConfigMap keys allow ``[-._a-zA-Z0-9]`` only)."""
    return "facts-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def cache_entry(key: str, message: str, at: str) -> str:
    """A cache value: the source, the Job's message, when it was read (``at``, RFC 3339)."""
    return json.dumps({"key": key, "message": message, "at": at}, separators=(",", ":"),
                      sort_keys=True)


class FactsFailed(ValueError):
    """The facts could not be read: ``error`` is what the Job (or the parser) reported,
    the mapping :func:`failure_text` turns into the problem and the fix."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(json.dumps(error))
        self.error = error


def parse_facts(message: str, name: str) -> tuple[ModelFacts, str | None]:
    """The facts in a facts Job's message, and the commit they were read at. Raises
    :class:`FactsFailed` for a failure the Job reported or a config the parser refuses,
    :class:`~.message.MessageError` for a message that is not a facts result."""
    doc = fm.decode(message)
    if "error" in doc:
        raise FactsFailed(doc["error"])
    try:
        facts = facts_from_hf_config(doc["config"], name=name, index=doc.get("index"),
                                     hf_quant_config=doc.get("quant"))
    except ValueError as exc:
        raise FactsFailed({"kind": fm.INVALID, "source": doc.get("source"),
                           "problem": str(exc)}) from exc
    return facts, doc.get("commit")


def finished_at(job: Mapping[str, Any]) -> float | None:
    """When a Job finished: its ``Complete`` or ``Failed`` condition's time."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return parse_rfc3339_or_none(cond.get("lastTransitionTime"))
    return None


@functools.lru_cache(maxsize=256)
def cached_facts(value: str | None, key: str, name: str) -> tuple[ModelFacts, str | None] | None:
    """The facts of a cache value for ``key`` (None when absent, for another source, or no
    longer readable: it is then read again). Memoized: a reconciliation, its decision and
    the tuning step each ask for the same value, and a decode is base64, zlib, JSON and
    the parser (its arguments are strings, its result frozen)."""
    if not value:
        return None
    try:
        entry = json.loads(value)
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        return parse_facts(str(entry.get("message") or ""), name)
    except ValueError:  # FactsFailed is one
        return None


def failure_text(error: Mapping[str, Any], svc: LLMService) -> str:
    """What a facts Job reported, for the ``Planned`` condition: the problem and the fix,
    naming the Secret (``namespace/name``) for a refused token and the spec's fields for a
    repository or revision that does not exist."""
    spec = svc.spec
    kind, status = error.get("kind"), error.get("status")
    where = error.get("source") or spec.model.name
    problem = str(error.get("problem") or "the read failed")
    answered = f" (HTTP {status})" if status else ""
    ref = spec.model.token_secret_ref
    if kind == fm.GATED:
        if ref is None:
            return (f"the Hub refused {where}{answered}: the repository is gated or private "
                    "and spec.model.tokenSecretRef is unset. Fix: create a Secret in namespace "
                    f"{svc.metadata.namespace} holding a Hugging Face token of an account "
                    "that accepted the model's licence, and name it in "
                    "spec.model.tokenSecretRef")
        return (f"the Hub refused {where}{answered} with the token of Secret "
                f"{svc.metadata.namespace}/{ref.name} (key {ref.key}): the Secret is "
                "missing, or its token is wrong or has no access to this gated repository. "
                f"Fix: put a token of an account that accepted the model's licence under "
                f"key {ref.key} of Secret {svc.metadata.namespace}/{ref.name} (kubectl "
                f"create secret generic {ref.name} -n {svc.metadata.namespace} "
                f"--from-literal={ref.key}=hf_...); it is read again within "
                f"{RETRY_SECONDS / 60:.0f} minutes")
    if kind == fm.NO_REVISION:
        return (f"{where}: spec.model.revision {spec.model.revision or 'main'!r} does not "
                f"exist in repository spec.model.name {spec.model.name!r}. Fix: set "
                "spec.model.revision to a branch, tag or commit of the repository")
    if kind == fm.NO_REPOSITORY:
        token = (f" with the token of Secret {svc.metadata.namespace}/{ref.name}" if ref
                 else " (no spec.model.tokenSecretRef)")
        return (f"spec.model.name {spec.model.name!r}: no such repository on the Hub, or it "
                f"is private and not readable{token}. Fix: check spec.model.name, or set "
                "spec.model.tokenSecretRef to a Secret with a token that can read it")
    fix = str(error.get("fix") or "give spec.model.architecture")
    if kind == fm.HTTP:
        fix += " (the operator's Hub mirror is its LLMOP_HF_ENDPOINT setting)"
    return f"{where}: {problem}{answered}. Fix: {fix}"


@dataclass(frozen=True)
class FactsDecision:
    """One look at a service's facts: plan with ``facts``, or wait, or report a failure."""

    facts: ModelFacts | None = None
    commit: str | None = None
    waiting: str | None = None  # the Planned condition's message while the Job runs
    failed: str | None = None  # the Planned condition's message after a failed read
    create_job: bool = False
    delete_job: bool = False
    cache: str | None = None  # the Job's message, to store under the source's key


def decide(svc: LLMService, cached: str | None, job: ObservedJob | None,
           message: str | None, why_failed: str, pending: PendingPod | None,
           now: float, finished_at: float | None = None) -> FactsDecision:
    """What to do about ``svc``'s facts, from the cache value (``cached``), its facts Job
    (``job``; None when there is none), the Job's termination message, why its pod failed
    (the kubelet's words, ``why_failed``), why it waits (``pending``) and when it finished
    (``finished_at``, its condition's time; else its creation)."""
    key = facts_key(svc.spec)
    found = cached_facts(cached, key, svc.spec.model.name)
    if found is not None:
        return FactsDecision(facts=found[0], commit=found[1],
                             delete_job=job is not None and job.finished)
    source = _source(svc)
    if job is None or job.deleting:
        return FactsDecision(create_job=job is None,
                             waiting=f"reading config.json of {source} in a facts Job")
    if not job.finished:
        said = f": {pending.reason}: {pending.message}" if pending is not None else ""
        return FactsDecision(waiting=f"reading config.json of {source} in Job "
                             f"{svc.metadata.namespace}/{job.name}{said}")
    error: Mapping[str, Any] | None = None
    if message:
        try:
            facts, commit = parse_facts(message, svc.spec.model.name)
        except FactsFailed as exc:
            error = exc.error
        except fm.MessageError:
            pass  # the log's tail (FallbackToLogsOnError): a crash, said below
        else:
            return FactsDecision(facts=facts, commit=commit, cache=message, delete_job=True)
    age = now - (finished_at or job.created or now)
    if age >= RETRY_SECONDS:  # a failed read whose TTL passed: read again (next pass creates)
        return FactsDecision(delete_job=True,
                             waiting=f"reading config.json of {source} again")
    if error is not None:
        return FactsDecision(failed=failure_text(error, svc))
    what = why_failed or job.reason or "it ended without a result"
    tail = f"; its log: {message.strip()[-300:]}" if message else ""
    return FactsDecision(
        failed=f"the facts Job {svc.metadata.namespace}/{job.name} for {source} failed: {what}"
        f"{tail}. Fix: see kubectl logs job/{job.name} -n {svc.metadata.namespace} (it "
        f"has {ACTIVE_DEADLINE_SECONDS} s; the Hub or HF_ENDPOINT must be reachable from the "
        "namespace), or give spec.model.architecture")


def _source(svc: LLMService) -> str:
    spec = svc.spec
    if spec.model.volume is not None:
        sub = f"/{spec.model.volume.sub_path}" if spec.model.volume.sub_path else ""
        return f"claim {spec.model.volume.claim_name}{sub}"
    return f"{spec.model.name}@{spec.model.revision or 'main'}"
