"""Average the weights of drafters fine-tuned from one parent (a "model soup").

Fine-tunes of one drafter on different seeds (scripts/h200/siblings.sh) land near each
other in weight space; their mean is often better than either on text neither saw
(Wortsman et al., 2022, "Model soups"). The drafter's outputs only choose what to draft,
and the target verifies every token, so a soup cannot change greedy output, only how
much of it is accepted.

    .venv/bin/python scripts/soup.py --out soup/ seed9/drafter-L5 seed10/drafter-L5 \\
        --vocab-from drafter/default_pair

The mean is taken in float32 and stored in each tensor's own dtype. config.json comes
from the first drafter; the draft vocabulary (optional in the published format) from
--vocab-from, else from the first drafter when it has one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from drafter.dflash import (  # noqa: E402
    DRAFT_VOCAB_FILE,
    WEIGHTS_FILE,
    DrafterError,
    read_drafter_config,
    read_weights,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("drafters", type=Path, nargs="+", help="drafter dirs of one shape")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--vocab-from", type=Path, default=None, help="a dir with draft_vocab.json")
    return p.parse_args(argv)


def mean_weights(drafters: list[Path]) -> dict[str, mx.array]:
    """The tensor-by-tensor mean of the drafters' weights; their names and shapes must
    agree, since only drafters of one architecture average into a working one."""
    loaded = [read_weights(d) for d in drafters]  # every *.safetensors part of each
    first = loaded[0]
    for d, weights in zip(drafters[1:], loaded[1:], strict=True):
        if weights.keys() != first.keys():
            raise SystemExit(f"{d}: its tensor names differ from {drafters[0]}'s")
        for name, w in weights.items():
            if w.shape != first[name].shape:
                raise SystemExit(f"{d}: {name} is {w.shape}, {drafters[0]} has {first[name].shape}")
    return {
        name: (sum(w[name].astype(mx.float32) for w in loaded) / len(loaded)).astype(t.dtype)
        for name, t in first.items()
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:  # each must be a DFlash checkpoint, as the loader checks it
        configs = [read_drafter_config(d) for d in args.drafters]
    except DrafterError as error:
        raise SystemExit(str(error)) from error
    if any(c != configs[0] for c in configs[1:]):
        raise SystemExit("the drafters' config.json files differ: not one architecture")
    soup = mean_weights(args.drafters)
    args.out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(args.out / WEIGHTS_FILE), soup, metadata={"format": "pt"})
    shutil.copy(args.drafters[0] / "config.json", args.out / "config.json")
    vocab = (args.vocab_from or args.drafters[0]) / DRAFT_VOCAB_FILE
    if vocab.exists():
        shutil.copy(vocab, args.out / DRAFT_VOCAB_FILE)
    print(f"{args.out}: the mean of {len(args.drafters)} drafters, {len(soup)} tensors")


if __name__ == "__main__":
    main()
