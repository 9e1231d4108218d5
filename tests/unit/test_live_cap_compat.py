"""The static compatibility checks of the live admission cap (issue 60), on small
snippets shaped like vLLM's sources (llm_operator_sandbox.vllm_compat)."""

from __future__ import annotations

import textwrap

import pytest

from llm_operator_sandbox.vllm_compat import (
    ARG_UTILS,
    ASYNC_SCHEDULER,
    ENGINE_CORE,
    INCOMPATIBLE,
    LIVE,
    METRICS_PROMETHEUS,
    NO_HOOK,
    SCHEDULER,
    SCHEDULER_CONFIG,
    check_active_cap,
    check_active_seqs_flag,
    check_constructor,
    check_release,
    compat_table,
    matrix_markdown,
)

ASYNC = """
from vllm.v1.core.sched.scheduler import Scheduler

class AsyncScheduler(Scheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
"""

SCHED = """
class Scheduler(SchedulerInterface):
    def __init__(self, vllm_config, kv_cache_config, block_size, log_stats=False):
        self.max_num_running_reqs = vllm_config.max_num_seqs
        self.max_num_active_reqs = self.max_num_running_reqs

    def schedule(self):
        def skip():
            pass
        while True:
            if len(self.running) >= self.max_num_active_reqs:
                break
"""

CONFIG = """
class SchedulerConfig:
    max_num_seqs: int = 128
    scheduler_cls: str | None = None

    def get_scheduler_cls(self):
        return resolve_obj_by_qualname(self.scheduler_cls)
"""

CORE = """
class EngineCore:
    def __init__(self, vllm_config, log_stats):
        Scheduler = vllm_config.scheduler_config.get_scheduler_cls()
        self.scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=None,
                                   block_size=16, log_stats=log_stats)
"""

PROM = """
import os
from prometheus_client import multiprocess
def get_registry():
    if os.getenv("PROMETHEUS_MULTIPROC_DIR") is not None:
        multiprocess.MultiProcessCollector(registry)
"""

LOGGERS = """
Gauge(name="vllm:num_requests_running")
Counter(name="vllm:num_preemptions")
"""

METRICS = ["vllm:num_requests_running", "vllm:num_preemptions_total"]


def release(**changes: str) -> dict[str, str]:
    """Sources shaped like vLLM 0.32's, with ``changes`` (path -> text) applied."""
    files = {ASYNC_SCHEDULER: ASYNC, SCHEDULER: SCHED, SCHEDULER_CONFIG: CONFIG,
             ENGINE_CORE: CORE, METRICS_PROMETHEUS: PROM,
             "vllm/v1/metrics/loggers.py": LOGGERS}
    files.update({k: textwrap.dedent(v) for k, v in changes.items()})
    return files


def test_a_release_shaped_like_0_32_is_live_with_file_and_line():
    report = check_release("0.32.0", release(), METRICS)
    assert report.verdict == LIVE, report
    cap = report.finding("active_cap")
    # the read inside schedule() (its nested function does not hide it), by line
    assert cap.ok and "v1/core/sched/scheduler.py:5 sets" in cap.evidence
    assert "v1/core/sched/scheduler.py:11 schedule() reads it" in cap.evidence
    assert "v1/engine/core.py:5" in report.finding("constructor").evidence


def test_no_active_cap_is_no_hook_and_names_what_schedule_reads():
    sched = SCHED.replace("        self.max_num_active_reqs = self.max_num_running_reqs\n", "")
    sched = sched.replace("self.max_num_active_reqs:", "self.max_num_running_reqs:")
    report = check_release("0.28.0", release(**{SCHEDULER: sched}), METRICS)
    assert report.verdict == NO_HOOK
    assert report.finding("active_cap").evidence == (
        "Scheduler.__init__ sets no self.max_num_active_reqs; "
        "schedule() reads self.max_num_running_reqs")


def test_set_but_no_longer_read_in_schedule_fails():
    sched = SCHED.replace("self.max_num_active_reqs:", "self.max_num_seqs_cap:")
    finding = check_active_cap(release(**{SCHEDULER: sched}))
    assert not finding.ok
    assert "sets self.max_num_active_reqs but schedule() never reads it" in finding.evidence


def test_a_read_in_a_method_schedule_calls_counts():
    sched = SCHED.replace("        while True:\n", "        self._admit()\n\n"
                          "    def _admit(self):\n        while True:\n")
    finding = check_active_cap(release(**{SCHEDULER: sched}))
    assert finding.ok, finding


def test_an_async_override_of_schedule_without_super_hides_the_base_read():
    asched = ASYNC + "\n    def schedule(self):\n        return self.max_num_running_reqs\n"
    assert not check_active_cap(release(**{ASYNC_SCHEDULER: asched})).ok
    calls = ASYNC + "\n    def schedule(self):\n        return super().schedule()\n"
    assert check_active_cap(release(**{ASYNC_SCHEDULER: calls})).ok


@pytest.mark.parametrize(("change", "check", "said"), [
    ({ASYNC_SCHEDULER: "class AsyncScheduler(SchedulerInterface):\n    pass\n"},
     "base_class", "no longer extends Scheduler"),
    ({ASYNC_SCHEDULER: "x = 1\n"}, "base_class", "no class AsyncScheduler"),
    ({ASYNC_SCHEDULER: ASYNC.replace("*args, **kwargs) -> None", "vllm_config) -> None")},
     "constructor", "does not forward *args, **kwargs"),
    ({ENGINE_CORE: CORE.replace("block_size=16", "page_size=16")},
     "constructor", "keywords ['page_size'] not accepted"),
    ({SCHEDULER: SCHED.replace("self.max_num_running_reqs = ", "self.slots = ")},
     "constructor", "no longer sets self.max_num_running_reqs"),
    ({SCHEDULER_CONFIG: CONFIG.replace("scheduler_cls: str | None = None", "")},
     "scheduler_cls", "no scheduler_cls field"),
    ({SCHEDULER_CONFIG: CONFIG.replace("resolve_obj_by_qualname", "lookup")},
     "scheduler_cls", "does not resolve a class name"),
    ({"vllm/v1/metrics/loggers.py": 'Gauge(name="vllm:num_requests_running")\n'},
     "metrics", "vllm:num_preemptions_total"),
    ({METRICS_PROMETHEUS: "import os\n"}, "metrics", "no PROMETHEUS_MULTIPROC_DIR"),
    ({"vllm/entrypoints/cli/serve.py": 'PATH = "/dev/termination-log"\n'},
     "termination", "entrypoints/cli/serve.py:1"),
    ({ENGINE_CORE: "class EngineCore:\n    pass\n"
      "def make(cfg):\n    S = cfg.get_scheduler_cls()\n    return S(vllm_config=cfg)\n"},
     "termination", "not constructed in EngineCore.__init__"),
])
def test_each_break_fails_its_check_and_makes_the_release_incompatible(change, check, said):
    report = check_release("9.9.9", release(**change), METRICS)
    finding = report.finding(check)
    assert not finding.ok and said in finding.evidence, finding
    assert report.verdict == INCOMPATIBLE


def test_a_missing_file_or_syntax_error_fails_instead_of_raising():
    files = release()
    del files[SCHEDULER]
    assert check_release("x", files, METRICS).verdict == INCOMPATIBLE
    assert not check_constructor(release(**{SCHEDULER: "class Scheduler(:\n"})).ok


def test_matrix_and_table():
    live = check_release("0.32.0", release(), METRICS)
    old = check_release("0.28.1", release(**{SCHEDULER: SCHED.replace(
        "self.max_num_active_reqs", "self.other")}), METRICS)
    text = matrix_markdown([live, old], "vllm")
    assert text.splitlines()[0].startswith("| vllm | verdict | base_class | constructor |")
    assert "| 0.28.1 | no-hook |" in text and "**FAIL**" in text
    table = compat_table([live, old], "vllm", "2026-12-05")
    # neither snippet names --max-num-active-seqs (ARG_UTILS absent)
    assert table["releases"] == {
        "0.32": {"verdict": "live", "checked": "0.32.0", "activeSeqsFlag": False},
        "0.28": {"verdict": "no-hook", "checked": "0.28.1", "activeSeqsFlag": False}}
    assert text.splitlines()[0].endswith("| --max-num-active-seqs |")
    assert "2026-12-05" in str(table["measured"])


# --- --max-num-active-seqs (vLLM #56758): a fact outside the verdict (issue 60 item 3) --
ARGS = """
class EngineArgs:
    def add_cli_args(parser):
        scheduler_group.add_argument("--max-num-seqs", **scheduler_kwargs["max_num_seqs"])
        scheduler_group.add_argument(
            "--max-num-active-seqs", **scheduler_kwargs["max_num_active_seqs"])
"""
CONFIG_ACTIVE = CONFIG.replace("    max_num_seqs: int = 128\n",
                               "    max_num_seqs: int = 128\n"
                               "    max_num_active_seqs: int | None = None\n")
SCHED_ACTIVE = SCHED.replace(
    "self.max_num_active_reqs = self.max_num_running_reqs",
    "self.max_num_active_reqs = self.scheduler_config.max_num_active_seqs")


def test_the_flag_is_found_with_file_and_line_and_leaves_the_verdict_alone():
    files = release(**{ARG_UTILS: ARGS, SCHEDULER_CONFIG: CONFIG_ACTIVE,
                       SCHEDULER: SCHED_ACTIVE})
    report = check_release("0.33.0", files, METRICS)
    assert report.verdict == LIVE and report.active_seqs is not None
    assert report.active_seqs.ok, report.active_seqs
    for said in ("engine/arg_utils.py:6 --max-num-active-seqs",
                 "config/scheduler.py:4 SchedulerConfig.max_num_active_seqs",
                 "v1/core/sched/scheduler.py:5 Scheduler.__init__ reads it"):
        assert said in report.active_seqs.evidence
    table = compat_table([report], "vllm", "2026-12-05")
    assert table["releases"]["0.33"]["activeSeqsFlag"] is True
    assert "| yes: engine/arg_utils.py:6" in matrix_markdown([report], "vllm")


@pytest.mark.parametrize(("changes", "said"), [
    ({}, "does not name --max-num-active-seqs"),
    ({ARG_UTILS: ARGS}, "SchedulerConfig has no max_num_active_seqs field"),
    ({ARG_UTILS: ARGS, SCHEDULER_CONFIG: CONFIG_ACTIVE},
     "Scheduler.__init__ never reads scheduler_config.max_num_active_seqs"),
])
def test_a_release_without_the_flag_says_what_is_missing(changes, said):
    finding = check_active_seqs_flag(release(**changes))
    assert not finding.ok and said in finding.evidence
    # a no-hook release (0.28-0.30) has no flag either, and keeps its verdict
    assert check_release("0.28.0", release(**changes), METRICS).verdict == LIVE


def test_the_committed_table_has_the_flag_from_0_31():
    import json
    from pathlib import Path
    raw = json.loads((Path(__file__).resolve().parents[2] / "operator" / "llm_operator"
                      / "knowledge" / "data" / "live_cap_compat.json").read_text())
    flags = {k: v["activeSeqsFlag"] for k, v in raw["releases"].items()}
    assert flags == {"0.28": False, "0.29": False, "0.30": False, "0.31": True,
                     "0.32": True, "0.33": True, "0.34": True}
