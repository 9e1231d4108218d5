"""``llm-operator recommend``: argument errors name the flag and the fix; an unreachable
Prometheus gives a hold with the reason (exit 0: holding is a decision)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_operator.cli import main
from llm_operator.inpod.tuner.server import free_port


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--service", "no-slash", "--current", "4"],
         "--service: 'no-slash' is not NAMESPACE/NAME"),
        (["--service", "ns/svc"], "--current: the server's max-num-seqs is not known"),
        (["--service", "ns/svc", "--current", "0"], "--current: must be at least 1"),
    ],
)
def test_bad_arguments_name_the_flag(argv: list[str], words: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["recommend", "--prometheus", "http://127.0.0.1:1", *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert words in err and "fix:" in err


def test_no_prometheus_url_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LLMOP_PROMETHEUS_URL", raising=False)
    assert main(["recommend", "--service", "ns/svc", "--current", "4"]) == 2
    assert "LLMOP_PROMETHEUS_URL" in capsys.readouterr().err


def test_unreachable_prometheus_holds_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["recommend", "--prometheus", f"http://127.0.0.1:{free_port()}",
               "--service", "ns/svc", "--current", "16", "-o", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["decision"]["action"] == "hold" and doc["decision"]["value"] == 16
    assert "Prometheus is unavailable" in doc["decision"]["reason"]


def test_a_pinned_cap_from_the_file_is_held(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "svc.yaml"
    f.write_text("apiVersion: llmops.dev/v1alpha1\nkind: LLMService\n"
                 "metadata: {name: svc, namespace: ns}\n"
                 "spec: {model: {name: m}, engine: {maxNumSeqs: 12}}\n")
    rc = main(["recommend", "--prometheus", f"http://127.0.0.1:{free_port()}",
               "--service", "ns/svc", "-f", str(f)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Pinned by the user" in out and "12 → 12" in out


@pytest.mark.parametrize("flag", ["--tuned", "--knee"])  # --knee: the former name
def test_the_tuned_value_is_shown_and_is_not_the_upper_bound(
        flag: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 32 item 2: the tuning result is where the cap starts, not its ceiling.
    monkeypatch.setenv("COLUMNS", "300")  # one table row per line
    argv = ["recommend", "--prometheus", f"http://127.0.0.1:{free_port()}",
            "--service", "ns/svc", "--current", "4", flag, "4", "--plan-max", "64"]
    assert main([*argv, "-o", "json"]) == 0
    evidence = json.loads(capsys.readouterr().out)["decision"]["evidence"]
    assert (evidence["tuned"], evidence["upperBound"]) == (4, 64)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "upper: the planner's memory limit" in out
    assert "4 (the tuning result: where the cap starts, not a bound)" in out
