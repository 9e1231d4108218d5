"""Generate a tiny Llama model (random weights, byte-level BPE tokenizer) for the real
vLLM CPU engine, with no hub access.

Runs with the vLLM venv's Python (it needs torch, transformers and tokenizers)::

    .venv-vllm/bin/python sandbox/llm_operator_sandbox/tiny_model.py OUTDIR [--hidden 128]

or from code in that interpreter: ``make_tiny_llama(outdir)``. The project's own venv
does not have torch; call the script through a subprocess from there
(:func:`ensure_tiny_llama` does that, caching by the arguments).

The result is about 1 MB, deterministic for given arguments (fixed seeds), and serves
with ``python -m vllm.entrypoints.openai.api_server --model OUTDIR``. The demo
(``llm-operator demo``) and the tests (``tests/support/tiny_model.py``) both use it. It
imports nothing of the operator, so the vLLM venv can run this file as a script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# A few lines of text to train the BPE merges on: words a benchmark prompt uses.
_CORPUS_WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which "
    "this be or has had not but first one their its new after who they have two been more "
    "model token cache batch request server latency throughput memory engine kubernetes "
    "operator service deploy tune scale queue prefill decode attention layer weight "
    "hello world quick brown fox jumps over lazy dog number value time system data"
).split()

MARKER = "llmop-tiny-model.json"



def tiny_shape(hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               intermediate: int = 256, vocab: int = 1000) -> Any:
    """The performance model's ``ModelShape`` of the Llama :func:`make_tiny_llama` builds
    with the same dimensions (imported lazily: this script also runs under vLLM's Python,
    which need not have llm_operator)."""
    from llm_operator.planning.perfmodel import ModelShape

    params = layers * (2 * hidden * hidden + 2 * hidden * (hidden // heads) * kv_heads
                       + 3 * hidden * intermediate) + 2 * vocab * hidden
    return ModelShape(name="tiny", parameters=params, num_layers=layers, hidden_size=hidden,
                      num_attention_heads=heads, num_kv_heads=kv_heads,
                      head_dim=hidden // heads, vocab_size=vocab)

def _corpus(lines: int = 400) -> list[str]:
    """Deterministic generated text lines (no randomness from the clock)."""
    out = []
    n = len(_CORPUS_WORDS)
    for i in range(lines):
        words = [_CORPUS_WORDS[(i * 7 + j * 13 + (i * j) % 5) % n] for j in range(12)]
        out.append(" ".join(words) + f" {i} {i * 31 % 1000}.")
    return out


def make_tiny_llama(
    outdir: str | os.PathLike[str],
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 256,
    vocab: int = 1000,
    max_position: int = 4096,
    seed: int = 0,
    head_dim: int = 0,
) -> Path:
    """Write a tiny ``LlamaForCausalLM`` (bf16 safetensors) and its tokenizer to ``outdir``.

    The tokenizer is a byte-level BPE of ``vocab`` entries (at least the 256 byte symbols
    plus the special tokens) trained on generated text; the model has random weights.
    ``head_dim`` (0: ``hidden // heads``) sets each attention head's size apart from the
    hidden size, as Gemma's and Qwen3's configs do: the real-nodes demo's stand-in uses it
    for a large KV cache per token (what vLLM stores per token is 2 x layers x kv_heads x
    head_dim values) on a model that stays small. Returns the folder. Needs torch,
    transformers and tokenizers (the vLLM venv).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if hidden % heads or heads % kv_heads:
        raise ValueError(
            f"hidden ({hidden}) must divide by heads ({heads}) and heads by kv_heads ({kv_heads})"
        )
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)

    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=max_position,
    )
    # A minimal chat template so /v1/chat/completions works too.
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fast.save_pretrained(out)
    real_vocab = tok.get_vocab_size()

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=real_vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        **({"head_dim": head_dim} if head_dim else {}),
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    key = _key_args(hidden, layers, heads, kv_heads, intermediate, vocab, max_position, seed)
    (out / MARKER).write_text(json.dumps({**key, **({"head_dim": head_dim} if head_dim else {})}))
    return out


def _key_args(*values: Any) -> dict[str, Any]:
    names = ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "max_position",
             "seed")
    return dict(zip(names, values, strict=True))


def model_args(**kwargs: int) -> dict[str, int]:
    """The generator's arguments: its defaults updated by ``kwargs``. ``head_dim`` is kept
    only where it is given (not 0), so the default model's folder stays the one every
    cache already holds."""
    defaults = {"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 256,
                "vocab": 1000, "max_position": 4096, "seed": 0}
    unknown = set(kwargs) - set(defaults) - {"head_dim"}
    if unknown:
        raise TypeError(f"unknown tiny-model arguments: {sorted(unknown)}")
    return {**defaults, **{k: v for k, v in kwargs.items() if k != "head_dim" or v}}


def model_folder(args: dict[str, int]) -> str:
    """The cache folder's name for :func:`model_args`' result (a digest of them)."""
    digest = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]
    return f"tiny-llama-{digest}"


def ensure_tiny_llama(
    cache_root: str | os.PathLike[str],
    python: str | os.PathLike[str],
    **kwargs: int,
) -> Path:
    """Return a folder holding the tiny model for ``kwargs``, generating it once with
    ``python`` (an interpreter that has torch and transformers) if it is not there yet.

    Usable from the project's own venv (no torch needed here): it runs this file as a
    script in a subprocess.
    """
    args = model_args(**kwargs)
    out = Path(cache_root) / model_folder(args)
    if (out / MARKER).exists() and (out / "model.safetensors").exists():
        return out
    # Generated beside it, then renamed into place: processes sharing the cache (the test
    # lanes run at once) never read a model another is still writing.
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [str(python), str(Path(__file__).resolve()), str(tmp)]
    for k, v in args.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    try:
        tmp.rename(out)
    except OSError:  # another process put it there first (or a broken one is there)
        shutil.rmtree(tmp, ignore_errors=True)
        if not ((out / MARKER).exists() and (out / "model.safetensors").exists()):
            shutil.rmtree(out, ignore_errors=True)
            return ensure_tiny_llama(cache_root, python, **kwargs)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: generate the tiny model into OUTDIR."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("outdir")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=256)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--max-position", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--head-dim", type=int, default=0, help="0: hidden // heads")
    a = p.parse_args(argv)
    make_tiny_llama(a.outdir, hidden=a.hidden, layers=a.layers, heads=a.heads,
                    kv_heads=a.kv_heads, intermediate=a.intermediate, vocab=a.vocab,
                    max_position=a.max_position, seed=a.seed, head_dim=a.head_dim)
    sys.stdout.write(f"{a.outdir}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
