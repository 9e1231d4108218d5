"""Load a running vLLM server with vLLM's own benchmark (``vllm.benchmarks.serve``).

The benchmark runs in a child process under the vLLM venv's Python (the project's venv
has no vLLM), with a bounded ``--num-prompts``. The child writes the scalar part of the
result dict (throughput, TTFT/TPOT/ITL percentiles, goodput, ...) to a JSON file.
The demo (``llm-operator demo``) loads its served model with it; the tests import it
from ``tests/support/vllm_load.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_operator.inpod.tuner.server import engine_metric  # noqa: F401 - re-exported for the tests

_CHILD = r"""
import contextlib, io, json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser(); add_cli_args(p)
args = p.parse_args(sys.argv[2:])
with contextlib.redirect_stdout(io.StringIO()):
    r = main(args)
json.dump({k: v for k, v in r.items() if isinstance(v, (int, float, str)) or v is None},
          open(sys.argv[1], "w"))
"""


@dataclass(frozen=True)
class Load:
    """One bounded load: ``num_prompts`` requests from ``concurrency`` clients."""

    concurrency: int
    num_prompts: int
    input_len: int = 128
    output_len: int = 256
    seed: int = 0
    goodput: Sequence[str] = ()  # vLLM's --goodput objectives, e.g. ("ttft:2000", "tpot:100")
    prefix_len: int = 0  # tokens of input_len shared by every prompt (one random prefix)
    # Prompts from a file in ShareGPT's shape (a JSON list of {"conversations": [{"value":
    # prompt}, {"value": answer}]}, sent as written; vLLM's benchmark skips prompts over
    # 1,024 tokens) instead of random ones; input_len and prefix_len then do not apply.
    prompts_file: str | None = None

    def argv(self, base_url: str, model: str, tokenizer: str | None = None) -> list[str]:
        """The ``vllm bench serve`` arguments (pure). ``model`` is the name the server
        serves; ``tokenizer`` a local folder when that name is not one (default: model)."""
        args = [
            "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer or model,
            *(["--dataset-name", "sharegpt", "--dataset-path", self.prompts_file,
               "--sharegpt-output-len", str(self.output_len)]
              if self.prompts_file else
              ["--dataset-name", "random",
               "--random-input-len", str(self.input_len - self.prefix_len),
               "--random-output-len", str(self.output_len), "--random-range-ratio", "0"]),
            "--num-prompts", str(self.num_prompts), "--max-concurrency", str(self.concurrency),
            "--request-rate", "inf", "--ignore-eos", "--temperature", "0",
            "--seed", str(self.seed), "--disable-tqdm", "--num-warmups", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
        ]
        if self.goodput:
            args += ["--goodput", *self.goodput]
        if self.prefix_len and not self.prompts_file:
            args += ["--random-prefix-len", str(self.prefix_len)]
        return args


class LoadRun:
    """A benchmark child process; ``wait()`` returns its result dict."""

    def __init__(self, python: str | os.PathLike[str], base_url: str, model: str,
                 load: Load, tokenizer: str | None = None) -> None:
        self.load = load
        fd, name = tempfile.mkstemp(prefix="llmop-bench-", suffix=".json")
        os.close(fd)
        self.result_path = Path(name)
        self._log = tempfile.TemporaryFile()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            [str(python), "-c", _CHILD, str(self.result_path),
             *load.argv(base_url, model, tokenizer)],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def running(self) -> bool:
        """True while the benchmark runs."""
        return self.proc.poll() is None

    def wait(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """Wait for the benchmark; return its result or raise with its output's tail."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        try:
            if rc != 0:
                raise RuntimeError(f"vllm bench serve exited with {rc}:\n"
                                   f"{self.output_tail()}")
            result: dict[str, Any] = json.loads(self.result_path.read_text())
            return result
        finally:
            self._log.close()
            self.result_path.unlink(missing_ok=True)

    def output_tail(self, chars: int = 3000) -> str:
        """The last ``chars`` of what the benchmark printed so far."""
        self._log.seek(0)
        return self._log.read()[-chars:].decode(errors="replace")

    def kill(self) -> None:
        """Stop the benchmark (its process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)


def run_load(python: str | os.PathLike[str], base_url: str, model: str, load: Load,
             timeout_s: float = 600.0) -> dict[str, Any]:
    """Run one bounded load to completion and return the benchmark's result dict."""
    return LoadRun(python, base_url, model, load).wait(timeout_s)
