"""The tuner names the engine module's scheduler and cap file by string (it imports
nothing of the operator): they must match what the server pod runs."""

from __future__ import annotations

from llm_operator.inpod.engine.cap import CAP_FILE_ENV, FAILURE_PREFIX, METRIC_CAP
from llm_operator.inpod.tuner import runner
from llm_operator.rendering.admission import ENGINE_SCHEDULER_CLS


def test_the_tuner_and_the_server_pod_name_the_same_engine() -> None:
    assert runner.ENGINE_SCHEDULER_CLS == ENGINE_SCHEDULER_CLS
    assert runner.ENGINE_CAP_FILE_ENV == CAP_FILE_ENV
    assert runner.CAP_METRIC == METRIC_CAP
    assert runner.ENGINE_FAILURE_PREFIX == FAILURE_PREFIX
