"""Benchmark (not a test): classic decode vs each draft width for one target/drafter pair.

    .venv/bin/python scripts/bench_widths.py --model TARGET_DIR --drafter DRAFTER_DIR \
        --widths 2,3,4,5,8,16 --max-tokens 128 --n 3

Prints per arm: decode tok/s (mean and min..max over the n repeats), the
speedup over classic, acceptance length (tokens per round) and time per
round. Without --model/--drafter it builds the tiny random pair (plumbing
check only: a random drafter accepts almost nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from mlx_lm import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drafter.benchmark import (  # noqa: E402
    DEFAULT_PROMPTS,
    format_table,
    measure_widths,
    summarize,
)
from drafter.dflash import load_drafter, write_random_drafter  # noqa: E402
from drafter.engine import Engine  # noqa: E402
from drafter.tiny import write_tiny_model  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="target model directory (mlx-lm format)")
    parser.add_argument("--drafter", type=Path, help="DFlash drafter directory")
    parser.add_argument("--widths", default="2,3,4,5,8,16", help="comma-separated widths")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--n", type=int, default=3, help="repeats per arm")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--prompt", action="append", help="prompt text (repeatable)")
    parser.add_argument("--json", type=Path, help="also write every sample here")
    return parser.parse_args(argv)


def tiny_pair(root: Path) -> tuple[Path, Path]:
    target = write_tiny_model(root / "target", "qwen3")
    return target, write_random_drafter(root / "drafter", target)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    widths = [int(w) for w in args.widths.split(",") if w]
    with tempfile.TemporaryDirectory() as scratch:
        if args.model is None or args.drafter is None:
            args.model, args.drafter = tiny_pair(Path(scratch))
        model, tokenizer = load(str(args.model))
        drafter = load_drafter(args.drafter, model)
        engine = Engine(
            model, tokenizer, model_id=args.model.name, context_length=4096, drafter=drafter
        )
        samples = measure_widths(
            engine,
            [None, *widths],
            args.prompt or DEFAULT_PROMPTS,
            args.max_tokens,
            args.n,
            warmup=args.warmup,
            on_progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(f"target={args.model} drafter={args.drafter} max_tokens={args.max_tokens} n={args.n}")
    print(format_table(summarize(samples)))
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=2))


if __name__ == "__main__":
    main()
