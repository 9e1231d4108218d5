"""Real evaluators for the search: vLLM servers this process starts, or one given by URL.

The I/O edge of the tuner (the search itself is pure, in :mod:`.search`). Runs under the
vLLM image's Python.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .bench import BenchTarget, measure
from .measure import Measurement, TrialFailed
from .server import ServerStartError, VLLMServer, engine_metric, engine_metrics
from .space import CHUNKED_FLAGS, Config

log = logging.getLogger(__name__)

SEARCHED_FLAGS = ("--max-num-seqs", "--max-num-batched-tokens", "--enable-chunked-prefill",
                  "--no-enable-chunked-prefill")


def accepted_flags(python: str = sys.executable) -> set[str] | None:
    """The option strings the installed vLLM OpenAI server accepts, or None if unknown.

    In-process when ``python`` is this interpreter (the parser module moved between vLLM
    versions; both places are tried), else from ``--help=all`` of ``python``.
    """
    if python == sys.executable:
        try:
            try:
                from vllm.utils.argparse_utils import FlexibleArgumentParser
            except ImportError:  # older vLLM
                from vllm.utils import FlexibleArgumentParser
            for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
                try:
                    m = __import__(mod, fromlist=["make_arg_parser"])
                except ImportError:
                    continue
                parser = m.make_arg_parser(FlexibleArgumentParser())
                return set(parser._option_string_actions)
        except Exception as exc:  # noqa: BLE001 - fall back to --help
            log.debug("In-process flag discovery failed: %s", exc)
    for help_flag in ("--help=all", "--help"):
        try:
            out = subprocess.run(
                [python, "-m", "vllm.entrypoints.openai.api_server", help_flag],
                capture_output=True, text=True, timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode == 0 and "--model" in out.stdout:
            import re

            return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", out.stdout))
    return None


def vllm_batch_defaults(world_size: int = 1) -> tuple[int | None, int | None]:
    """vLLM's own defaults for (max-num-seqs, max-num-batched-tokens) of the OpenAI server
    on this machine, as the installed vLLM computes them; (None, None) if it cannot say."""
    try:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.usage.usage_lib import UsageContext

        mnbt, mns = EngineArgs.get_batch_defaults(world_size)
        ctx = UsageContext.OPENAI_API_SERVER
        return mns.get(ctx), mnbt.get(ctx)
    except Exception as exc:  # noqa: BLE001 - any vLLM version drift: unknown defaults
        log.info("Could not read vLLM's batch defaults (%s); treating them as unknown", exc)
        return None, None


def pinned_flags(server_args: Sequence[str]) -> set[str]:
    """Which searched flags the fixed server arguments already set (user pins)."""
    pins = set()
    for a in server_args:
        name = a.split("=", 1)[0]
        if name in SEARCHED_FLAGS:
            pins.add(name)
    return pins


def measure_trial(target: BenchTarget, concurrency: int) -> Measurement:
    """One benchmark of ``target`` at ``concurrency``; a benchmark that fails fails the
    trial (:class:`TrialFailed`), not the search."""
    try:
        return measure(target, concurrency)
    except Exception as exc:  # noqa: BLE001 - the benchmark failing fails one trial
        raise TrialFailed(f"benchmark failed: {exc}") from exc


@dataclass
class _ServerSession:
    server: VLLMServer
    target: BenchTarget

    @property
    def startup_s(self) -> float:
        return self.server.startup_s

    @property
    def waited_s(self) -> float:
        """Time spent waiting for the machine-wide vLLM lock (not part of the trial)."""
        return self.server.lock_wait_s

    def measure(self, concurrency: int) -> Measurement:
        return measure_trial(self.target, concurrency)

    def close(self) -> None:
        self.server.stop()


@dataclass
class ServerEvaluator:
    """Starts a fresh vLLM server per configuration (``--model`` mode)."""

    model: str
    target_template: BenchTarget
    server_args: list[str] = field(default_factory=list)  # fixed flags: pins, KV size, ...
    python: str = sys.executable
    log_dir: Path = Path("/tmp/llmop-tuning")
    start_timeout_s: float = 900.0
    starts: int = 0

    def start(self, config: Config) -> _ServerSession:
        """Start vLLM with the fixed arguments plus ``config``'s flags."""
        self.starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        server = VLLMServer(
            model=self.model,
            flags=[*self.server_args, *config.flags()],
            python=self.python,
            log_path=self.log_dir / f"server-{self.starts:02d}.log",
            start_timeout_s=self.start_timeout_s,
        )
        try:
            server.start()
        except ServerStartError as exc:
            raise TrialFailed(f"server did not start: {start_error_line(exc)}") from exc
        target = BenchTarget(**{**self.target_template.__dict__, "base_url": server.url,
                                "log_path": self.log_dir / "bench.log"})
        return _ServerSession(server, target)


def start_error_line(exc: ServerStartError) -> str:
    """The most telling line of a failed start: the last ``...Error: ...`` of the log."""
    lines = [ln for ln in exc.log_tail.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error:" in ln or "error:" in ln:
            return ln.split("] ", 1)[-1].strip()[:300]
    return (lines[-1][:300] if lines else str(exc).splitlines()[0])


@dataclass
class _UrlSession:
    target: BenchTarget
    startup_s: float = 0.0

    def measure(self, concurrency: int) -> Measurement:
        try:
            return measure(self.target, concurrency)
        except Exception as exc:  # noqa: BLE001
            raise TrialFailed(f"benchmark failed: {exc}") from exc

    def close(self) -> None:
        return None


@dataclass
class UrlEvaluator:
    """A server this process did not start (``--url`` mode): it cannot be restarted, so
    only its current configuration can be measured."""

    target: BenchTarget

    def start(self, config: Config) -> _UrlSession:
        """Measure the given server; any other configuration needs a restart."""
        if config != Config():
            raise TrialFailed("cannot restart a server given by --url")
        return _UrlSession(self.target)


def served_model(base_url: str) -> str:
    """The first model id the server at ``base_url`` serves."""
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=10) as r:
        data = json.load(r)
    return str(data["data"][0]["id"])


def split_args(text: str | None) -> list[str]:
    """Shell-split a string of server arguments (``None`` gives none)."""
    return shlex.split(text) if text else []


# The server pod's admission controller (llm_operator.inpod.engine, copied next to the
# tuner); named here as strings because the tuner imports nothing of the operator
# (tests/unit/test_tuner_engine_names.py checks they match).
ENGINE_SCHEDULER_CLS = "llm_operator.inpod.engine.scheduler.AdmissionCapScheduler"
ENGINE_CAP_FILE_ENV = "LLMOP_ADMISSION_CAP_FILE"
CAP_METRIC = "llmop_admission_cap"
LIVE_METRIC = "llmop_admission_live"  # 1: the engine's vLLM has the hook (max_num_active_reqs)
ENGINE_FAILURE_PREFIX = "llmop-live-cap:"  # the scheduler's own failure line in the log


def scheduler_failure(log_text: str) -> str | None:
    """Why the admission scheduler stopped a server at start, from its log: the
    scheduler's own line (:data:`ENGINE_FAILURE_PREFIX`: vLLM's scheduler classes not as
    it needs them), else an error line naming its package (its code not importable);
    None when the log blames something else (the start would fail without it too)."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in lines:
        if ENGINE_FAILURE_PREFIX in ln:
            return ln[ln.index(ENGINE_FAILURE_PREFIX):][:300]
    for ln in reversed(lines):
        if "Error" in ln and "llm_operator" in ln:
            return ln.split("] ", 1)[-1][:300]
    return None


class LiveCapUnavailable(Exception):
    """The started engine cannot move its admission cap live: a sweep through the cap
    would measure one batch limit for every value."""


@dataclass
class _LiveSession:
    server: VLLMServer
    target: BenchTarget
    startup_s: float
    waited_s: float

    def measure(self, concurrency: int) -> Measurement:
        return measure_trial(self.target, concurrency)

    def close(self) -> None:
        return None  # the server stays up for the next cap; LiveCapEvaluator.close stops it


@dataclass
class LiveCapEvaluator:
    """One vLLM server for every max-num-seqs of a max-num-batched-tokens: the server runs
    with ``--max-num-seqs capacity`` and the operator's admission scheduler
    (``--scheduler-cls``, found on ``engine_path``), and each trial's cap is written to the
    cap file and waited for on ``/metrics`` (``llmop_admission_cap``), as the operator's
    live adaptation does. A restart happens only when max-num-batched-tokens changes, so
    a time budget buys more measured trials (see ``starts``). Between trials the engine
    is idle, so a trial's cap holds from its first request."""

    model: str
    target_template: BenchTarget
    capacity: int
    engine_path: str  # a folder holding llm_operator/inpod/engine
    server_args: list[str] = field(default_factory=list)
    default_max_num_seqs: int | None = None  # what a trial without a cap runs with
    default_max_num_batched_tokens: int | None = None  # vLLM's, so None and it share a server
    python: str = sys.executable
    log_dir: Path = Path("/tmp/llmop-tuning")
    start_timeout_s: float = 900.0
    report_timeout_s: float = 30.0
    starts: int = 0
    fallback_reason: str | None = None  # set when the engine could not take caps live
    _server: VLLMServer | None = field(default=None, init=False, repr=False)
    _server_of: tuple[int | None, bool | None] | None = field(default=None, init=False,
                                                            repr=False)
    _fallback: ServerEvaluator | None = field(default=None, init=False, repr=False)

    @property
    def notes(self) -> list[str]:
        """What the result says about how max-num-seqs was swept."""
        if self.fallback_reason is not None:
            return [f"max-num-seqs not swept live: {self.fallback_reason}; one server start "
                    "per value instead"]
        return [f"max-num-seqs swept live on one server per max-num-batched-tokens (runner "
                f"capacity {self.capacity}, admission cap moved per trial)"]

    @property
    def cap_file(self) -> Path:
        return self.log_dir / "admission-cap"

    def needs_start(self, config: Config) -> bool:
        """Whether a trial of ``config`` starts a server (the search's time estimate):
        only a new max-num-batched-tokens or chunked-prefill setting, the first trial, or
        after the fallback."""
        return (self._fallback is not None or self._server is None
                or self._server_key(config) != self._server_of)

    def _server_key(self, config: Config) -> tuple[int | None, bool | None]:
        """What needs a server of its own: the batched tokens and chunked prefill."""
        return (config.max_num_batched_tokens or self.default_max_num_batched_tokens,
                config.chunked_prefill)

    def start(self, config: Config) -> _LiveSession | _ServerSession:
        """Set ``config``'s cap on the running server (starting one when needed). When the
        engine reports that it cannot take a cap live (``llmop_admission_live`` not 1), this
        and every later trial start a server per value, as :class:`ServerEvaluator` does."""
        if self._fallback is None:
            try:
                return self._start_live(config)
            except LiveCapUnavailable as exc:
                self.close()
                self.fallback_reason = str(exc)
                log.warning("Sweeping max-num-seqs with one server start per value: %s", exc)
                self._fallback = ServerEvaluator(
                    self.model, self.target_template, self.server_args, python=self.python,
                    log_dir=self.log_dir, start_timeout_s=self.start_timeout_s,
                    starts=self.starts)
        try:
            return self._fallback.start(config)
        finally:
            self.starts = self._fallback.starts

    def _start_live(self, config: Config) -> _LiveSession:
        cap = config.max_num_seqs or self.default_max_num_seqs or self.capacity
        if cap > self.capacity:
            raise TrialFailed(f"max-num-seqs {cap} is above the live server's capacity "
                              f"{self.capacity}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        startup_s = waited_s = 0.0
        key = self._server_key(config)
        if self._server is None or key != self._server_of:
            self.close()
            self._write(self.capacity)
            self._server = self._start(*key)
            self._server_of = key
            startup_s, waited_s = self._server.startup_s, self._server.lock_wait_s
        server = self._server
        t0 = time.monotonic()
        self._write(cap)
        while engine_metric(server.url, CAP_METRIC) != cap:
            if time.monotonic() - t0 > self.report_timeout_s:
                raise TrialFailed(f"the engine did not report the admission cap {cap} within "
                                  f"{self.report_timeout_s:.0f} s")
            time.sleep(0.2)
        log.info("Admission cap %d in force after %.1f s (same server)", cap,
                 time.monotonic() - t0)
        target = BenchTarget(**{**self.target_template.__dict__, "base_url": server.url,
                                "log_path": self.log_dir / "bench.log"})
        return _LiveSession(server, target, startup_s, waited_s)

    def _write(self, cap: int) -> None:
        tmp = self.cap_file.with_suffix(".tmp")
        tmp.write_text(f"{cap}\n")
        os.replace(tmp, self.cap_file)

    def _start(self, batched: int | None, chunked: bool | None = None) -> VLLMServer:
        self.starts += 1
        metrics_dir = self.log_dir / f"prometheus-{self.starts:02d}"
        # Empty: a dead server's files there would be served as this one's gauges.
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        flags = [*self.server_args, "--max-num-seqs", str(self.capacity),
                 "--scheduler-cls", ENGINE_SCHEDULER_CLS]
        if batched is not None:
            flags += ["--max-num-batched-tokens", str(batched)]
        if chunked is not None:
            flags += [CHUNKED_FLAGS[chunked]]
        server = VLLMServer(
            model=self.model, flags=flags, python=self.python,
            log_path=self.log_dir / f"server-{self.starts:02d}.log",
            start_timeout_s=self.start_timeout_s,
            env={"PYTHONPATH": self.engine_path, ENGINE_CAP_FILE_ENV: str(self.cap_file),
                 "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)},
        )
        try:
            server.start()
        except ServerStartError as exc:
            # An image of a vLLM the scheduler class does not fit (a custom spec.image
            # whose version its tag does not say) stops at start: the values are still
            # measured, one server start each, without the scheduler.
            said = scheduler_failure(server.log_path.read_text(errors="replace")
                                     if server.log_path and server.log_path.exists() else "")
            if said is not None:
                raise LiveCapUnavailable(
                    f"the server did not start with the admission scheduler: {said}") from exc
            raise TrialFailed(f"server did not start: {start_error_line(exc)}") from exc
        try:
            live = engine_metrics(server.url).get(LIVE_METRIC)
        except Exception as exc:  # noqa: BLE001 - an unreadable /metrics proves no hook
            live, why = None, f" ({exc})"
        else:
            why = ""
        if live != 1:
            server.stop()
            seen = "no" if live is None else f"{live:g} for"
            raise LiveCapUnavailable(
                f"the engine reports {seen} {LIVE_METRIC}{why} (its vLLM lacks "
                "--max-num-active-seqs, or the scheduler class did not load), so a cap "
                "written to it would not apply")
        return server

    def close(self) -> None:
        """Stop the server (after the search)."""
        if self._server is not None:
            self._server.stop()
            self._server = None


def sweep_of(evaluator: UrlEvaluator | ServerEvaluator | LiveCapEvaluator,
             searched: bool) -> str | None:
    """How max-num-seqs was measured (the result's ``sweep``): the live evaluator's note
    (swept live, or why not), one server start per value otherwise; None where it was
    not searched or a server given by URL measured it."""
    if isinstance(evaluator, LiveCapEvaluator):
        return evaluator.notes[0]
    if isinstance(evaluator, ServerEvaluator) and searched:
        return "max-num-seqs measured with one server start per value"
    return None
