"""Exactness record on the H200: the probe on 32 prompts, bf16 default pair and 4-bit
target, at the width the policy resolves there. Every divergence is listed with its
class. Usage: python3 scripts/h200/exactness.py --out FILE.json"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from make_train_data import SHORT_PROMPTS, held_out_prompts  # noqa: E402

from drafter.checkpoints.smollm2 import ensure_smollm2  # noqa: E402
from drafter.loading import LoadOptions, load_engine  # noqa: E402
from drafter.probe import PROBE_PROMPTS, probe_exactness  # noqa: E402


def prompts(tokenizer: Any) -> list[list[int]]:
    texts = list(PROBE_PROMPTS)
    texts += [text for kind, text in SHORT_PROMPTS if kind != "chat"]
    chats = [text for kind, text in SHORT_PROMPTS if kind == "chat"]
    held = [t[:400] for kind in ("code", "prose") for t in held_out_prompts(kind, 4)]
    encoded = [tokenizer.encode(t) for t in texts + held]
    for text in chats:
        messages = [{"role": "user", "content": text}]
        encoded.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    return encoded[:32]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    q4 = ensure_smollm2(None, "bfloat16", quantize_bits=4)
    record = []
    for name, model in (("bf16 default pair", None), ("4-bit affine g32", str(q4))):
        began = time.perf_counter()
        options = LoadOptions(
            cache_dir=Path("/root/cache"),
            model=model,
            draft_model="drafter/default_pair" if model else None,
            exactness="rounding",
        )
        loaded = load_engine(options)
        config = loaded.speculative_config()
        print(name, "dflash.config", json.dumps(config), flush=True)
        engine = loaded.engine
        if not engine.speculative:  # the startup probe found a defect: probe anyway
            print(name, "serving classic", flush=True)
            continue
        results = []
        for i, ids in enumerate(prompts(engine.tokenizer)):
            result = probe_exactness(engine, prompt=ids, tokens=args.tokens)
            results.append(result)
            print(
                name,
                "prompt",
                i,
                result.exactness,
                "noise",
                round(result.kernel_noise, 4),
                [d.describe() for d in result.divergences],
                flush=True,
            )
        classes = [r.exactness for r in results]
        summary = {
            "target": name,
            "width": engine.block_size,
            "dflash_config": config,
            "prompts": len(results),
            "tokens_each": args.tokens,
            "classes": {c: classes.count(c) for c in ("exact", "rounding", "differs")},
            "divergences": sum(len(r.divergences) for r in results),
            "max_margin": max((r.max_margin or 0.0) for r in results),
            "max_kernel_noise": max(r.kernel_noise for r in results),
            "per_prompt": [
                {
                    "class": r.exactness,
                    "kernel_noise": r.kernel_noise,
                    "divergences": [d.__dict__ for d in r.divergences],
                }
                for r in results
            ],
            "seconds": round(time.perf_counter() - began, 1),
        }
        record.append(summary)
        print(name, "SUMMARY", json.dumps({k: v for k, v in summary.items() if k != "per_prompt"}))
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
