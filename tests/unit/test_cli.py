"""The command line as a user runs it: `llm-operator plan` and `render` on the examples."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a child process, wide enough that tables do not wrap."""
    return subprocess.run(
        [sys.executable, "-m", "llm_operator.cli", *args], capture_output=True, text=True,
        timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin", **env},
    )


def test_plan_70b_on_h100_chooses_tp_above_one_and_says_why() -> None:
    out = run_cli("plan", str(ROOT / "examples" / "llama-3.1-70b-h100.yaml"))
    assert out.returncode == 0, out.stderr
    tp = re.search(r"tensorParallelSize\s*│\s*(\d+)", out.stdout)
    assert tp and int(tp.group(1)) >= 2, out.stdout
    # The reason names the weights against one GPU's usable memory.
    assert re.search(r"not TP=1: weights [\d.]+ GB", out.stdout), out.stdout
    # The predicted curve and the tuner's starting point follow the plan.
    assert "Predicted:" in out.stdout and "knee" in out.stdout
    # One start per knob: the one rendered and the tuner's hint, with the SLO's verdict.
    flat = " ".join(out.stdout.split())
    assert re.search(r"Start \(rendered; [^)]*\): --max-num-seqs \d+ "
                     r"--max-num-batched-tokens \d+", flat), flat
    assert "meets the SLO (TTFT 1,500 ms, ITL 60 ms)" in flat, flat


def test_plan_of_a_bad_spec_names_the_field_and_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService", "metadata": {"name": "x"},
        "spec": {"model": {"name": "acme/unknown-13b"}, "gpus": {"product": "H100"}},
    }))
    out = run_cli("plan", str(bad))
    assert out.returncode == 2
    assert "spec.model.architecture" in out.stderr and "fix:" in out.stderr
    # The command can read the model's config.json itself: the fix names the flag.
    fix = " ".join(out.stderr.split())
    assert "--model-config hub" in fix and "--model-config DIR" in fix, out.stderr
    out = run_cli("render", str(bad))
    assert out.returncode == 2 and "--model-config" in out.stderr, out.stderr


def test_render_examples_gives_one_deployment_and_service_each() -> None:
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    out = run_cli("render", *examples)
    assert out.returncode == 0, out.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]
    assert kinds.count("Deployment") + kinds.count("LeaderWorkerSet") == len(examples)
    assert kinds.count("Service") == len(examples)


def test_render_asks_no_pod_for_more_gpus_than_llmop_gpus_per_node_gives(tmp_path: Path) -> None:
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService", "metadata": {"name": "big"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"},
                 "gpus": {"product": "A100-40GB"},
                 "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 8}},
    }))

    def gpus_per_pod(out: subprocess.CompletedProcess[str]) -> list[int]:
        """The GPU limit of every container of the rendered workloads."""
        assert out.returncode == 0, out.stderr
        text = yaml.safe_dump_all(d for d in yaml.safe_load_all(out.stdout)
                                  if d and d["kind"] in ("Deployment", "LeaderWorkerSet"))
        return [int(n) for n in re.findall(r"nvidia.com/gpu: '(\d+)'", text)]

    assert max(gpus_per_pod(run_cli("render", str(manifest)))) == 8
    four = gpus_per_pod(run_cli("render", str(manifest), LLMOP_GPUS_PER_NODE="4"))
    assert four and max(four) <= 4


# --- bad input: one message naming the file and the problem, a non-zero exit, no traceback


def _manifest(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_plan_of_the_custom_gpu_example_prints_the_plan_and_says_why_there_is_no_curve() -> None:
    # The GPU is given only by memoryGib: the planner can size it, the speed model cannot.
    out = run_cli("plan", str(ROOT / "examples" / "custom-model-pvc.yaml"))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert re.search(r"tensorParallelSize\s*│\s*\d+", out.stdout), out.stdout
    assert "No predicted curve" in out.stdout and "spec.gpus.memoryGib" in out.stdout


def test_cli_errors_name_the_file_and_the_problem_and_exit_non_zero(tmp_path: Path) -> None:
    svc = ("apiVersion: {api}\nkind: LLMService\nmetadata: {{name: x}}\n"
           "spec: {{model: {{name: meta-llama/Llama-3.1-8B-Instruct}}, gpus: {{product: L4}}}}\n")
    cases = {
        # what the user gave -> what the one-line error must say
        _manifest(tmp_path, "broken.yaml", "spec: [\n  model: x\n"): "is not valid YAML at line",
        str(tmp_path / "missing.yaml"): "no such file",
        _manifest(tmp_path, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"):
            "holds no LLMService (found: ConfigMap)",
        _manifest(tmp_path, "empty.yaml", ""): "holds no LLMService (the file is empty)",
        _manifest(tmp_path, "v1.yaml", svc.format(api="llmops.dev/v1")):
            "has apiVersion 'llmops.dev/v1'",
        str(tmp_path): "is a directory",
    }
    for command in ("plan", "render"):
        for path, expected in cases.items():
            out = run_cli(command, path)
            assert out.returncode == 2, (command, path, out.stdout, out.stderr)
            assert "Traceback" not in out.stderr, out.stderr
            assert expected in " ".join(out.stderr.split()), (command, path, out.stderr)
            assert Path(path).name in out.stderr
            assert out.stdout == "", out.stdout  # nothing half-printed on stdout


def test_a_bad_field_is_reported_with_its_file(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "bad-field.yaml", (
        "apiVersion: llmops.dev/v1alpha1\nkind: LLMService\nmetadata: {name: x}\n"
        "spec: {model: {name: meta-llama/Llama-3.1-8B-Instruct}, gpus: {product: L4},\n"
        "       engine: {maxNumSeqs: -3}}\n"))
    out = run_cli("render", path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "bad-field.yaml: spec.engine.maxNumSeqs" in " ".join(out.stderr.split())
