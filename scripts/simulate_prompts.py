"""The training-time acceptance simulation on any prompts: does the engine lose anything?

`scripts/train_drafter.py` reports acceptance by simulating greedy rounds in PyTorch over
the target's greedy continuations. This runs that same simulation (`acceptance`) on the
prompts a served sweep used, with the served drafter, so the two can be compared prompt
by prompt: if the served figure is lower, the engine loses acceptance; if they agree, the
drafter (or the prompt set) is what sets it. Continuations ignore EOS, as the sweep does.

    python scripts/simulate_prompts.py --target-dir <float32 target dir> \\
        --prompts-file server/tooling/eval_prompts.json --tokens 64 --widths 3 4 8

Needs torch, transformers and safetensors (no MLX), CPU or CUDA.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from static_decode import StaticDecoder  # noqa: E402
from train_drafter import (  # noqa: E402
    Drafter,
    FeatureTap,
    Sequences,
    acceptance,
    drafter_weights,
    load_target,
)

REPO = Path(__file__).resolve().parents[1]


def load_drafter(path: Path, device: torch.device) -> tuple[Drafter, dict, torch.Tensor | None]:
    config = json.loads((path / "config.json").read_text())
    drafter = Drafter(config)
    drafter.load_state_dict(drafter_weights(path), strict=True)
    vocab_file = path / "draft_vocab.json"
    vocab = None
    if vocab_file.is_file():
        vocab = torch.tensor(json.loads(vocab_file.read_text())["token_ids"], device=device)
    return drafter.to(device).eval(), config, vocab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-dir", type=Path, required=True)
    parser.add_argument("--drafter", type=Path, default=REPO / "drafter" / "default_pair")
    prompts_file = REPO / "server" / "tooling" / "eval_prompts.json"
    parser.add_argument("--prompts-file", type=Path, default=prompts_file)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--widths", type=int, nargs="+", default=[3, 4, 8])
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    target, tokenizer, target_config = load_target(None, args.target_dir, device, dtype)
    drafter, config, vocab = load_drafter(args.drafter, device)
    tap = FeatureTap(target, config["dflash_config"]["target_layer_ids"])
    decoder = StaticDecoder(target, target_config)
    prompts = json.loads(args.prompts_file.read_text())["prompts"]
    pairs, names = [], []
    for index, text in enumerate(prompts, 1):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        prompt = torch.tensor([ids], device=device)
        pad = torch.zeros_like(prompt, dtype=torch.bool)
        continuation = decoder.generate(prompt, pad, args.tokens, ())  # no EOS: as served
        pairs.append((ids, continuation[0].tolist()))
        names.append(f"prompt {index}")
    data = Sequences(pairs, names, device)
    with torch.no_grad():
        for width in args.widths:
            result = acceptance(drafter, target, tap, data, width, device, vocab=vocab)
            print(json.dumps({"width": width, "acceptance": {n: result[n] for n in names}}))


if __name__ == "__main__":
    main()
