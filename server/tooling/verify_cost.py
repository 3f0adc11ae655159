"""Per-round verify cost against width, for target shapes of real size.

A speculative round pays one target forward over B rows. Where that forward
costs about the same for 1..B rows, wide blocks are cheap; where MLX switches
kernels at a row count (the quantized multi-row vector kernel serves a few
rows, a matrix kernel takes over after), the cost steps up. This measures the
step directly: random weights are enough for cost (acceptance needs a trained
pair), quantized the way a served target would be.

    python -m server.tooling.verify_cost --arch qwen3-4b --quant affine --quant nvfp4 \
        --out cost.json

Each (arch, quant) builds the model once, prefills a fixed context, then for
each row count runs `warmup` untimed and `repeats` timed forwards, each
followed by a rollback of those rows (drafter.rollback), so every forward sees
the same context length.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from drafter import rollback
from drafter.checkpoints.tiny import QWEN3, QWEN3_5, build_model
from drafter.forward import Forward

SHAPES: dict[str, dict[str, Any]] = {
    # Qwen3-4B dimensions (36 layers, hidden 2560, GQA 32/8, head_dim 128).
    "qwen3-4b": {
        **QWEN3,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
    },
    # Qwen3.5-4B-like hybrid: 3 Gated DeltaNet layers per full-attention layer.
    "qwen3.5-4b": {
        **QWEN3_5,
        "hidden_size": 2560,
        "intermediate_size": 9216,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 248320,
        "linear_num_value_heads": 32,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "full_attention_interval": 4,
        "max_position_embeddings": 262144,
    },
    "tiny-qwen3": QWEN3,  # for a quick check of the harness on any machine
    "tiny-qwen3.5": QWEN3_5,
}

QUANT = {  # mode -> (group_size, bits) as mlx-lm quantizes for that mode
    "affine": (64, 4),
    "nvfp4": (16, 4),
    "mxfp4": (32, 4),
    "mxfp8": (32, 8),
}


def build_target(arch: str, quant: str | None, dtype: mx.Dtype = mx.bfloat16) -> nn.Module:
    model = build_model(SHAPES[arch], seed=0)
    model.set_dtype(dtype)
    if quant is not None:
        group_size, bits = QUANT[quant]
        nn.quantize(model, group_size=group_size, bits=bits, mode=quant)
    mx.eval(model.parameters())
    Forward(model)  # recurrent layers record their inputs for rollback
    return model


def time_forward(model: nn.Module, cache: list[Any], rows: int) -> float:
    """Seconds for one forward over `rows` new tokens, then undo them."""
    tokens = mx.random.randint(0, 1000, (1, rows))
    mx.eval(tokens)
    ckpt = rollback.checkpoint(cache)
    start = time.perf_counter()
    logits = model(tokens, cache=cache)
    mx.eval(logits)
    seconds = time.perf_counter() - start
    rollback.rollback(cache, ckpt, 0, rows)
    return seconds


def measure(
    model: nn.Module, rows: Sequence[int], context: int, warmup: int, repeats: int
) -> list[dict[str, Any]]:
    cache = make_prompt_cache(model)
    mx.eval(model(mx.random.randint(0, 1000, (1, context)), cache=cache))
    results = []
    for r in rows:
        for _ in range(warmup):
            time_forward(model, cache, r)
        samples = [1000 * time_forward(model, cache, r) for _ in range(repeats)]
        results.append(
            {
                "rows": r,
                "median_ms": statistics.median(samples),
                "min_ms": min(samples),
                "max_ms": max(samples),
                "n": repeats,
            }
        )
        print(f"  rows={r:>2} median {results[-1]['median_ms']:.3f} ms", file=sys.stderr)
    return results


def host() -> dict[str, Any]:
    info = {key: str(value) for key, value in mx.device_info().items()}
    return {
        "platform": platform.platform(),
        "mlx": mx.__version__,
        "default_device": str(mx.default_device()),
        "device_info": info,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.tooling.verify_cost")
    parser.add_argument("--arch", action="append", choices=sorted(SHAPES), required=True)
    parser.add_argument("--quant", action="append", choices=[*QUANT, "none"], required=True)
    parser.add_argument("--rows", default="1,2,3,4,5,6,7,8,9,12,16")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    record: dict[str, Any] = {"host": host(), "context": args.context, "curves": []}
    for arch in args.arch:
        for quant in args.quant:
            print(f"{arch} {quant}", file=sys.stderr)
            start = time.perf_counter()
            model = build_target(arch, None if quant == "none" else quant)
            curve = measure(model, rows, args.context, args.warmup, args.repeats)
            seconds = time.perf_counter() - start
            record["curves"].append(
                {"arch": arch, "quant": quant, "points": curve, "wall_s": seconds}
            )
            del model
            mx.clear_cache()
            with open(args.out, "w") as f:
                json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
