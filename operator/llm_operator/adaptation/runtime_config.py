"""An adapter for a vLLM runtime-config endpoint that moves the admission cap live
(issue 60, item 3): pure request building and answer reading, plus one small HTTP edge
(:func:`call`).

**Not a released vLLM API.** vLLM's RFC #54816 ("Prototype runtime scheduler sequence
cap", open and unmerged as of 2026-12-05) proposes a live ``max_num_running_seqs``
admission cap, from 1 to the start-up ``--max-num-seqs``, read by ``GET
/v1/runtime_config`` and changed by ``PATCH /v1/runtime_config``, both "dev-gated" (only
registered when the server runs in its development mode). No vLLM release serves them, so
this module follows the RFC's description, and its shapes are this module's reading of
it: a JSON object with the key ``max_num_running_seqs`` (an integer) in the GET answer,
the PATCH body ``{"max_num_running_seqs": N}`` and an answer that echoes the key.

Whether a server has it (:func:`detect`): both of

1. ``GET /openapi.json`` lists ``/v1/runtime_config`` with a ``patch`` operation. FastAPI
   lists every registered route there, so a server whose dev-gated routes are off, or a
   vLLM without them (every release to date), does not list it; a server that serves no
   schema (``--disable-fastapi-docs``, a 404) leaves the decision to step 2 alone.
2. ``GET /v1/runtime_config`` answers 200 with an integer ``max_num_running_seqs``.

Anything else is unsupported, so the operator's behaviour on every existing vLLM is
unchanged (tests/vllm/test_runtime_config_probe.py checks it against the real CPU
server). A timeout or connection failure is ``UNKNOWN``: ask again later.

Not wired into the adaptation loop yet (docs/production/live-admission-cap.md says what
is left): the live cap still goes through the in-pod scheduler class and its ConfigMap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RUNTIME_CONFIG_PATH = "/v1/runtime_config"
OPENAPI_PATH = "/openapi.json"
CAP_KEY = "max_num_running_seqs"
JSON_TYPE = "application/json"


class Support(StrEnum):
    SUPPORTED = "Supported"  # the server advertises the endpoint and answers it
    UNSUPPORTED = "Unsupported"  # it does not: keep the operator's own mechanism
    UNKNOWN = "Unknown"  # the server did not answer (timeout, refused): ask again


@dataclass(frozen=True)
class Request:
    """One HTTP request, as :func:`call` sends it."""

    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = (("Accept", JSON_TYPE),)


@dataclass(frozen=True)
class Answer:
    """What came back: an HTTP status and body, or ``error`` (no HTTP answer: a
    timeout, a refused connection) with ``status`` None."""

    status: int | None
    body: bytes = b""
    error: str | None = None

    def json(self) -> Any:
        """The body as JSON, None when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None


@dataclass(frozen=True)
class Detection:
    support: Support
    reason: str
    cap: int | None = None  # the server's max_num_running_seqs where supported


@dataclass(frozen=True)
class PatchOutcome:
    """What a PATCH did: ``applied`` (the server echoes the cap asked for), ``retry``
    (no answer or a server error: the same request may succeed later),
    ``unsupported`` (the endpoint is gone: fall back to the operator's own mechanism)."""

    applied: bool
    message: str
    in_force: int | None = None
    retry: bool = False
    unsupported: bool = False


OPENAPI_REQUEST = Request("GET", OPENAPI_PATH)
GET_REQUEST = Request("GET", RUNTIME_CONFIG_PATH)


def _said(answer: Answer, limit: int = 200) -> str:
    text = answer.body.decode("utf-8", "replace").strip()
    return text[:limit] + ("..." if len(text) > limit else "") if text else "an empty body"


def advertised(openapi: Answer) -> bool | None:
    """Whether ``GET /openapi.json``'s answer lists ``PATCH /v1/runtime_config``; None
    when the server serves no schema (404) and the question stays open."""
    if openapi.status == 404:
        return None
    doc = openapi.json() if openapi.status == 200 else None
    paths = doc.get("paths") if isinstance(doc, dict) else None
    item = paths.get(RUNTIME_CONFIG_PATH) if isinstance(paths, dict) else None
    return isinstance(item, dict) and "patch" in item


def read_cap(answer: Answer) -> int | None:
    """The ``max_num_running_seqs`` of a 200 answer (an integer of at least 1), else None."""
    doc = answer.json() if answer.status == 200 else None
    value = doc.get(CAP_KEY) if isinstance(doc, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
        else None


def detection(openapi: Answer, get: Answer | None) -> Detection:
    """Whether the server has the endpoint, from its answers to :data:`OPENAPI_REQUEST`
    and (where the schema does not already rule it out) :data:`GET_REQUEST` (pure)."""
    for path, answer in ((OPENAPI_PATH, openapi), (RUNTIME_CONFIG_PATH, get)):
        if answer is not None and answer.status is None:
            return Detection(Support.UNKNOWN, f"GET {path} got no answer: {answer.error}")
        if answer is openapi and advertised(openapi) is False:
            return Detection(Support.UNSUPPORTED, (
                f"GET {OPENAPI_PATH} answered {openapi.status} without PATCH "
                f"{RUNTIME_CONFIG_PATH} (vLLM RFC #54816, unreleased): the live cap stays "
                "with the operator's own mechanism"))
    listed = advertised(openapi)
    if get is None:
        return Detection(Support.UNKNOWN, f"GET {RUNTIME_CONFIG_PATH} not asked yet")
    cap = read_cap(get)
    if cap is None:
        return Detection(Support.UNSUPPORTED, (
            f"GET {RUNTIME_CONFIG_PATH} answered {get.status} with {_said(get)}, not a JSON "
            f"object with an integer {CAP_KEY}"))
    how = "listed in its OpenAPI schema" if listed else "no OpenAPI schema served"
    return Detection(Support.SUPPORTED, f"PATCH {RUNTIME_CONFIG_PATH} ({how}); the server's "
                     f"{CAP_KEY} is {cap}", cap)


def patch_request(cap: int, capacity: int | None = None) -> Request:
    """The PATCH that sets the server's live cap to ``cap`` (at most ``capacity``, the
    server's ``--max-num-seqs``, where known). Raises ``ValueError`` naming the value and
    the fix for a cap the RFC's server would refuse."""
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"{CAP_KEY} must be an integer of at least 1, got {cap!r}: pass "
                         "the admission cap the adaptation decided (status.adaptation."
                         "maxNumSeqs)")
    if capacity is not None and cap > capacity:
        raise ValueError(f"{CAP_KEY} {cap} is above the server's --max-num-seqs {capacity} "
                         "(its runner capacity, fixed at start): lower the cap to at most "
                         f"{capacity}, or raise max-num-seqs by a rollout")
    body = json.dumps({CAP_KEY: cap}, separators=(",", ":")).encode()
    return Request("PATCH", RUNTIME_CONFIG_PATH, body,
                   (("Accept", JSON_TYPE), ("Content-Type", JSON_TYPE)))


def patch_outcome(answer: Answer, cap: int) -> PatchOutcome:
    """What the server's ``answer`` to :func:`patch_request` (``cap``) means (pure)."""
    what = f"PATCH {RUNTIME_CONFIG_PATH} {CAP_KEY}={cap}"
    if answer.status is None:
        return PatchOutcome(False, f"{what} got no answer ({answer.error}): the cap in "
                            "force is unknown; try again", retry=True)
    if answer.status == 200:
        echoed = read_cap(answer)
        if echoed == cap:
            return PatchOutcome(True, f"{what}: the server reports {cap} in force", cap)
        return PatchOutcome(False, f"{what} answered 200 with {_said(answer)}, not {CAP_KEY} "
                            f"{cap}: the cap in force is {echoed if echoed else 'unknown'}",
                            echoed)
    if answer.status in (404, 405):
        return PatchOutcome(False, f"{what} answered {answer.status}: the server no longer "
                            "serves the endpoint (restarted without it?); fall back to the "
                            "operator's own mechanism", unsupported=True)
    if answer.status in (400, 422):
        return PatchOutcome(False, f"{what} was refused ({answer.status}: {_said(answer)}): "
                            "the cap stays as it was; do not repeat this value")
    if answer.status >= 500 or answer.status == 429:
        return PatchOutcome(False, f"{what} answered {answer.status} ({_said(answer)}): try "
                            "again", retry=True)
    return PatchOutcome(False, f"{what} answered {answer.status} ({_said(answer)}): not "
                        "applied")


def call(base_url: str, request: Request, timeout_seconds: float = 5.0) -> Answer:
    """Send ``request`` to ``base_url`` (``http://HOST:PORT``) and return the answer,
    never raising for an HTTP error status or a network failure (the I/O edge)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(base_url.rstrip("/") + request.path, data=request.body,
                                 method=request.method, headers=dict(request.headers))
    try:
        with urllib.request.urlopen(req, timeout=timeout_seconds) as resp:  # noqa: S310
            return Answer(resp.status, resp.read())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read() or b"")
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Answer(None, error=f"{type(exc).__name__}: {reason}")


def detect(base_url: str, timeout_seconds: float = 5.0) -> Detection:
    """:func:`detection` of the server at ``base_url`` (two GETs at most)."""
    openapi = call(base_url, OPENAPI_REQUEST, timeout_seconds)
    if openapi.status is None or advertised(openapi) is False:
        return detection(openapi, None)
    return detection(openapi, call(base_url, GET_REQUEST, timeout_seconds))


def set_cap(base_url: str, cap: int, capacity: int | None = None,
            timeout_seconds: float = 5.0) -> PatchOutcome:
    """Send :func:`patch_request` to a server :func:`detect` found ``SUPPORTED`` and read
    its answer."""
    return patch_outcome(call(base_url, patch_request(cap, capacity), timeout_seconds), cap)
