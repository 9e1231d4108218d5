"""vLLM itself refuses every engine configuration of the corpus the operator refuses, and
the rules still say what vLLM's source says (real vLLM, no server started, no weights).

One subprocess under the vLLM interpreter: for each case of
``tests/unit/data/engine_refusals.yaml`` it parses the arguments the operator would render
(``make_plan(..., engine_rules=False)``, then ``planning.engine_argv``) with vLLM's own
``vllm serve`` parser and builds vLLM's configuration from them
(``AsyncEngineArgs.from_cli_args(...).create_engine_config()``, the checks ``vllm serve``
runs before it loads anything) on a local tiny Llama, and reports which raise and what
they say. The baseline, the corpus's valid spec, goes through the same harness and must
pass, so the harness can tell an accepted configuration from a refused one. The same
process finds each rule's ``says`` in the source of the vLLM function the rule cites, so
a vLLM upgrade that moves or rewords a check fails here (``engine_rules.VLLM_VERSION``
must also be the installed release).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.engine_refusals import baseline, cases, rendered_args, tiny_models
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.knowledge.engine_rules import RULES, VLLM_VERSION

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]

HARNESS = r"""
import importlib, inspect, json, sys, time
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm

job = json.load(sys.stdin)
top = FlexibleArgumentParser(prog="vllm")
ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))
out = {"version": vllm.__version__, "cases": {}, "sources": {}}
for name, case in job["cases"].items():
    model, start = job["models"][case["tiny"]], time.monotonic()
    try:
        ns = top.parse_args(["serve", model, *case["argv"]])
        ns.model = model
        AsyncEngineArgs.from_cli_args(ns).create_engine_config(UsageContext.OPENAI_API_SERVER)
        result = {"refused": False, "error": ""}
    except BaseException as exc:  # argparse exits; configs raise ValueError and kin
        result = {"refused": True, "error": f"{type(exc).__name__}: {exc}"}
    out["cases"][name] = {**result, "seconds": round(time.monotonic() - start, 3)}
for rule_id, (module, function, says) in job["sources"].items():
    obj = importlib.import_module(module)
    for part in function.split("."):
        obj = getattr(obj, part)
    out["sources"][rule_id] = says in inspect.getsource(obj)
print("RESULT " + json.dumps(out))
"""


def test_vllm_refuses_every_case_the_operator_refuses(tmp_path: Path) -> None:
    models = {key: str(ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON, **args))
              for key, args in tiny_models().items()}
    corpus = cases()
    job = {"models": models,
           "cases": {"baseline": {"tiny": "default", "argv": rendered_args(baseline())}}
           | {c.id: {"tiny": c.tiny, "argv": rendered_args(c.svc)} for c in corpus},
           "sources": {r.id: [r.module, r.function, r.says] for r in RULES}}
    start = time.monotonic()
    proc = subprocess.run([str(VLLM_PYTHON), "-c", HARNESS], input=json.dumps(job),
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    got = out["cases"]
    refused = sum(1 for c in corpus if got[c.id]["refused"])
    print(f"vLLM {out['version']}: {refused} of {len(corpus)} corpus cases refused, baseline "  # noqa: T201
          f"{'refused' if got['baseline']['refused'] else 'accepted'}; {elapsed:.1f} s")

    assert out["version"] == VLLM_VERSION
    assert not got["baseline"]["refused"], got["baseline"]["error"]  # the harness can pass
    says = {r.id: r.says for r in RULES}
    wrong = {c.id: got[c.id] for c in corpus
             if not got[c.id]["refused"] or says[c.rule] not in got[c.id]["error"]}
    assert not wrong, wrong  # each refused, for the reason the operator gives
    assert {r.id for r in RULES if not out["sources"][r.id]} == set()
    assert elapsed < 120
