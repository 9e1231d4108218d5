"""`llm-operator plan --model-config` and `llm-operator facts` (issue 33): a model's facts
from a local folder, and from a Hub that a local HTTP server plays (tests/support/hub.py,
HF_ENDPOINT; no test reaches the internet)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.hub import COMMIT, GPT_OSS_20B, INDEX, TOKEN, LocalHub, _Hub

from llm_operator import cli
from llm_operator.api.models import load_services
from llm_operator.cli.modelsource import facts_from_folder, facts_from_hub
from llm_operator.planning.sizing import plan_for_slo
from llm_operator.tuning.job import start_hint

pytestmark = pytest.mark.unit

pytest.importorskip("huggingface_hub")


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    local = LocalHub().__enter__()
    endpoint = local.endpoint
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from llm_operator.cli import modelsource
    monkeypatch.setattr(modelsource, "_READ", {})
    yield endpoint
    local.__exit__(None, None, None)


def test_facts_from_the_hub_at_a_revision_and_cached(hub: str) -> None:
    facts = facts_from_hub("openai/gpt-oss-20b", COMMIT)
    assert facts.source == "config.json" and facts.quantization == "mxfp4"
    assert facts.weight_bytes == 13_761_300_000
    assert (facts.full_attention_layers, facts.sliding_window_layers) == (12, 12)
    asked = len(_Hub.requests)
    assert asked and all(COMMIT in r or "/api/" in r for r in _Hub.requests)
    assert facts_from_hub("openai/gpt-oss-20b", COMMIT) is facts  # once per repo+revision
    assert len(_Hub.requests) == asked


def test_gated_repository_needs_the_token(hub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(cli.InputError) as exc:
        facts_from_hub("gated/gpt-oss-20b", None)
    assert "gated" in exc.value.problem and "HF_TOKEN" in exc.value.fix
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert facts_from_hub("gated/gpt-oss-20b", None).num_layers == 24


def test_missing_revision_and_missing_index(hub: str) -> None:
    with pytest.raises(cli.InputError) as exc:
        facts_from_hub("openai/gpt-oss-20b", "v9")
    assert "spec.model.revision" in exc.value.fix
    # No safetensors index: the facts stand; the weight bytes are estimated.
    facts = facts_from_hub("nosafetensors/gpt-oss-20b", None)
    assert facts.weight_bytes is None and facts.quantization == "mxfp4"


def _service(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "oss", "namespace": "ml"},
        "spec": {"model": {"name": name}, "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                 "workload": {"concurrency": 32, "inputTokens": 1536, "outputTokens": 512}}}))
    return path


def test_plan_command_reads_a_local_folder(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT_OSS_20B))
    (folder / "model.safetensors.index.json").write_text(json.dumps(INDEX))
    svc = _service(tmp_path, "openai/gpt-oss-20b")
    # Without the config the model is not in the catalog: refused, naming the field.
    assert cli.main(["plan", str(svc), "--no-curve"]) == 2
    assert "spec.model.architecture" in capsys.readouterr().err
    assert cli.main(["plan", str(svc), "--no-curve", "--model-config", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width
    assert "weightBytes from model.safetensors.index.json" in out
    assert facts_from_folder(folder, "x").weight_bytes == 13_761_300_000
    # With the curve: the performance model reads the same facts, and the start it prints
    # is the one the pods render and the operator's tuning Job gets (the SLO sizing's).
    assert cli.main(["plan", str(svc), "--model-config", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    (_, parsed), = load_services([str(svc)])
    facts = facts_from_folder(folder, parsed.spec.model.name)
    plan = plan_for_slo(parsed.spec, facts=facts)
    assert plan.slo["sized"] and start_hint(parsed, plan, facts) == plan.start_seqs
    assert ("Start (rendered; the tuner's hint where it searches max-num-seqs): "
            f"--max-num-seqs {plan.start_seqs} ") in out
    # render plans the same way: the manifests of a model the catalog does not know.
    assert cli.main(["render", str(svc), "--model-config", str(folder)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert "openai/gpt-oss-20b" in json.dumps(deployment)


def test_plan_command_from_the_hub(hub: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    svc = _service(tmp_path, "openai/gpt-oss-20b")
    assert cli.main(["plan", str(svc), "--model-config", "hub"]) == 0
    out = capsys.readouterr().out
    assert "architecture from config.json" in out
    # The performance model predicts from the same facts: a curve and a starting point.
    assert "Predicted: openai/gpt-oss-20b" in out
    assert "Start (rendered; the tuner's hint" in out and "No predicted curve" not in out
    # A folder without config.json: a clear error naming the option.
    assert cli.main(["plan", str(svc), "--model-config", str(tmp_path)]) == 2
    assert "has no config.json" in " ".join(capsys.readouterr().err.split())


def test_facts_command_writes_the_files_compactly(hub: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`llm-operator facts`, the facts Job's command: the files as the operator reads them
    back, on stdout and in the termination log, with the commit they were read at."""
    from llm_operator.facts import message as fm

    log = tmp_path / "termination-log"
    assert cli.main(["facts", "--repo", "openai/gpt-oss-20b", "--termination-log",
                     str(log)]) == 0
    text = log.read_text()
    assert capsys.readouterr().out.strip() == text
    doc = fm.decode(text)
    assert doc["commit"] == COMMIT and doc["config"] == GPT_OSS_20B
    assert doc["index"] == {"metadata": INDEX["metadata"]}
    # A gated repository without the token: exit 2, the failure's kind and HTTP status.
    assert cli.main(["facts", "--repo", "gated/gpt-oss-20b", "--termination-log",
                     str(log)]) == 2
    err = fm.decode(log.read_text())["error"]
    assert (err["kind"], err["status"]) == ("gated", 401)
    assert cli.main(["facts", "--repo", "openai/gpt-oss-20b", "--revision", "v9",
                     "--termination-log", str(log)]) == 2
    assert fm.decode(log.read_text())["error"]["kind"] == "revision"
    # A folder (a model on a volume): the same form, no commit.
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT_OSS_20B))
    assert cli.main(["facts", "--repo", "x", "--source", str(folder),
                     "--termination-log", str(log)]) == 0
    assert fm.decode(log.read_text())["commit"] is None
