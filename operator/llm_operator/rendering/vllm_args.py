"""The ``vllm serve`` command line of the server pods (pure): the model, then the flags.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..api.constants import VLLM_PORT
from ..api.errors import SpecErrors
from ..api.models import LLMService, LLMServiceSpec
from ..planning import OVERRIDABLE, Plan, engine_flags, engine_rule_errors, managed_flag_errors
from .pod import MODEL_MOUNT_PATH

VLLM_COMMAND = ("vllm", "serve")  # the console script every vLLM image installs


def model_source(spec: LLMServiceSpec) -> tuple[str, bool]:
    """What vLLM's ``--model`` gets, and whether the model comes from a volume.

    A hub model is its id (downloaded into the cache volume); a model on a PVC is the
    path it is mounted at, served under ``spec.model.name``.
    """
    if spec.model.volume is not None:
        return MODEL_MOUNT_PATH, True
    return spec.model.name, False


def _check_overrides(overrides: Mapping[str, int]) -> None:
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise ValueError(
                f"override {key!r} is not an engine setting the operator tunes; "
                f"known: {', '.join(sorted(OVERRIDABLE))}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"override {key!r} must be a positive integer, got {value!r}")


def build_vllm_args(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None, *,
    active_cap_flag: bool = False,
) -> list[str]:
    """The arguments of :data:`VLLM_COMMAND` (``vllm serve``): the model, positional and
    first (``vllm serve`` rejected ``--model`` in 0.11 and deprecates it in 0.32), then
    :func:`build_vllm_flags`."""
    model, _ = model_source(svc.spec)
    return [model, *build_vllm_flags(svc, plan, overrides, active_cap_flag=active_cap_flag)]


def build_vllm_flags(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None, *,
    active_cap_flag: bool = False,
) -> list[str]:
    """The flags of ``vllm serve`` after the model.

    Order is fixed: endpoint, parallelism, memory, batching, numerics,
    switches the user set, revision, then ``spec.engine.extraArgs`` verbatim and last.
    ``overrides`` (e.g. ``{"maxNumSeqs": 48}`` from tuning) apply only where the user
    left the field to ``auto``. The engine's own flags come from
    :func:`~llm_operator.planning.engine_flags`, which the planner checks against vLLM's
    start-up rules (:mod:`llm_operator.knowledge.engine_rules`); with overrides they are checked
    again here. Raises :class:`SpecErrors` when extraArgs set a flag the operator manages
    or an override breaks such a rule, and ``ValueError`` on an unknown override key.
    ``active_cap_flag``: the cap as ``--max-num-active-seqs`` and ``--max-num-seqs`` at the
    runner's capacity (:func:`~llm_operator.planning.engine_flags`;
    :func:`~.admission.uses_active_seqs_flag` decides).
    """
    spec = svc.spec
    errors = managed_flag_errors(spec)
    if errors:
        raise SpecErrors(errors)
    if overrides:
        _check_overrides(overrides)
        errors = engine_rule_errors(spec, plan, overrides, overridden_only=True,
                                    active_cap_flag=active_cap_flag)
        if errors:  # a tuned or adapted value the engine would refuse with the rest
            raise SpecErrors(errors)

    _, from_volume = model_source(spec)
    args = [
        "--served-model-name", spec.model.name,
        "--host", "0.0.0.0",
        "--port", str(VLLM_PORT),
    ]  # fmt: skip
    for flag in engine_flags(spec, plan, overrides, active_cap_flag=active_cap_flag):
        args += flag.items
    # A revision selects a hub commit; a model on a volume is whatever the volume holds.
    if spec.model.revision and not from_volume:
        args += ["--revision", spec.model.revision]
    args += ["--shutdown-timeout", str(spec.rollout.drain_seconds)]  # the drain
    args += list(spec.engine.extra_args)
    return args
