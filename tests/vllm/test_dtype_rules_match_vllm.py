"""The GPU dtype rules (``llm_operator.knowledge.dtype_support``) say what vLLM's source says.

Each rule names the vLLM class whose ``get_min_capability()`` and
``get_supported_act_dtypes()`` it mirrors; this reads those methods from the installed
vLLM's source files (with ``ast``: nothing of vLLM is imported, so no GPU and no compiled
kernel is needed) and checks the numbers and dtypes, so that a vLLM upgrade that moves a
minimum fails here. The source is the ``.venv-vllm`` interpreter's vLLM, or the folder
``LLMOP_VLLM_SOURCE`` names (a ``vllm/`` package, e.g. unpacked from the wheel).
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

from llm_operator.knowledge.dtype_support import RULES
from llm_operator.knowledge.engine_rules import VLLM_VERSION

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
QUANT = Path("model_executor") / "layers" / "quantization"


def _vllm_source() -> Path | None:
    given = os.environ.get("LLMOP_VLLM_SOURCE")
    if given:
        return Path(given)
    if not VLLM_PYTHON.exists():
        return None
    out = subprocess.run(
        [str(VLLM_PYTHON), "-c", "import importlib.util as u; "
         "print(u.find_spec('vllm').submodule_search_locations[0])"],
        capture_output=True, text=True, timeout=60, check=True)
    return Path(out.stdout.strip())


SOURCE = _vllm_source()
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(SOURCE is None, reason=f"no vLLM at {VLLM_PYTHON}")]


def _method(path: Path, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"{path}: no {cls}.{name}")


def _returned(fn: ast.FunctionDef) -> ast.expr:
    returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value]
    assert len(returns) == 1, ast.unparse(fn)
    return returns[0]


_DTYPES = {"bfloat16": "bfloat16", "half": "float16", "float16": "float16",
           "float32": "float32", "float": "float32", "float8_e4m3fn": "float8_e4m3fn"}


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_matches_vllms_source(rule_id: str) -> None:
    assert SOURCE is not None
    rule = RULES[rule_id]
    # The release the rules were read from (vllm/_version.py, written by its build).
    assert f"version = '{VLLM_VERSION}'" in (SOURCE / "_version.py").read_text()
    got = _returned(_method(SOURCE / QUANT / rule.file, rule.cls, "get_min_capability"))
    assert isinstance(got, ast.Constant) and got.value == rule.min_capability, \
        (rule_id, ast.unparse(got))
    file, cls = (rule.act_cls.split(":") if rule.act_cls else (rule.file, rule.cls))
    listed = _returned(_method(SOURCE / QUANT / file, cls, "get_supported_act_dtypes"))
    assert isinstance(listed, ast.List), ast.unparse(listed)
    vllm_dtypes = {_DTYPES[e.attr] for e in listed.elts if isinstance(e, ast.Attribute)}
    # The operator refuses only what vLLM refuses: its dtypes are vLLM's (fp8 activation
    # dtypes are not a --dtype value).
    assert set(rule.act_dtypes) == vllm_dtypes - {"float8_e4m3fn"}, rule_id
    if rule.exact:  # compressed-tensors picks the scheme only at exactly that capability
        ct = (SOURCE / QUANT / "compressed_tensors" / "compressed_tensors.py").read_text()
        sm = ast.unparse(_method(SOURCE / QUANT / "compressed_tensors" / "compressed_tensors.py",
                                 "CompressedTensorsConfig", "_is_fp8_w4a8_sm90"))
        assert f"{rule.min_capability}, error=False, match_exact=True" in sm
        assert "No compressed-tensors compatible scheme" in ct
