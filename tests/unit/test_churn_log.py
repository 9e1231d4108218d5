"""The churn benchmark's count of kopf's handler failures, from an operator log."""

from __future__ import annotations

import pytest
from benchmarks.churn_cluster import errors_by_handler

pytestmark = pytest.mark.unit

# Lines as kopf writes them (shortened after the message's start).
LOG = """\
[14:07:41] [ERROR] [churn/svc-0001] Handler 'pod-scheduling' failed with an exception and will
Traceback (most recent call last):
aiohttp.client_exceptions.ClientConnectorError: Cannot connect
[14:07:41] [ERROR] [churn/svc-0002] Handler 'reconcile' failed temporarily
[14:07:42] [ERROR] [churn/svc-0003] Handler 'reconcile' failed temporarily
[14:07:43] [ERROR] [churn/svc-0004] Handler 'tuning' failed permanently: no
[14:07:44] [INFO] [churn/svc-0004] Handler 'reconcile' succeeded.
"""


def test_failures_are_counted_by_handler_and_kind() -> None:
    assert errors_by_handler(LOG) == {
        "pod-scheduling: exception": 1, "reconcile: temporarily": 2, "tuning: permanently": 1}


def test_a_clean_log_has_none() -> None:
    assert errors_by_handler("[...] Handler 'reconcile' succeeded.\n") == {}
