"""Tokens each speculative round emits, prompt by prompt, through the real engine.

A served sweep reports acceptance as one mean per prompt. This shows what the mean hides:
how many rounds accept no draft at all (they emit only the target's own token) and how
many accept the whole block, and what the rounds up to each prompt's first EOS accept
apart from those past it. Greedy, EOS ignored, as the sweep runs; the default pair
unless --model / --draft-model name another; the BLAS the server would choose.

    .venv/bin/python scripts/round_emits.py --width 8 --tokens 64 \\
        --prompts-file server/tooling/short_prompts.json --out rounds.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from server.cli import EXIT_BAD_VALUE, with_chosen_blas  # noqa: E402
from server.tooling.bench import read_prompts_file  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--prompts-file", type=read_prompts_file, required=True, help="a bench prompts file"
    )
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--model", default=None, help="default: the embedded pair's target")
    p.add_argument("--draft-model", default=None, help="default: the embedded pair's drafter")
    p.add_argument("--out", type=Path, required=True, help="JSON: every prompt's rounds")
    return p.parse_args(argv)


def _per_round(emits: list[int], width: int) -> dict[str, float]:
    return {
        "rounds": len(emits),
        "no_draft_accepted": round(sum(e == 1 for e in emits) / max(len(emits), 1), 3),
        "all_accepted": round(sum(e == width for e in emits) / max(len(emits), 1), 3),
        "tokens_per_round": round(sum(emits) / max(len(emits), 1), 3),
    }


def before_eos(row: dict[str, Any]) -> list[int]:
    """A prompt's rounds up to the one that emitted its first EOS, the prefill's left out.
    Past the EOS (the sweep ignores it) the target writes text a client that stops there
    never sees."""
    end = row["eos_round"] + 1 if row["eos_round"] is not None else len(row["emitted"])
    return row["emitted"][1:end]


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: rounds, the share that accepted no draft, the share that accepted all,
    and tokens per round, over all rounds and over those up to each prompt's first EOS;
    then, as a served sweep reports acceptance, the mean over prompts of each prompt's
    tokens per round (`per_prompt`), both ways. The prefill's first token is not a round."""
    out: dict[str, dict[str, Any]] = {}
    width = rows[0]["width"]

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    def per_prompt(chosen: list[dict[str, Any]]) -> dict[str, float | None]:
        all_rounds = [sum(r["emitted"][1:]) / max(len(r["emitted"]) - 1, 1) for r in chosen]
        early = [sum(e) / len(e) for r in chosen if (e := before_eos(r))]
        return {"all": mean(all_rounds), "before_eos": mean(early)}

    for kind in dict.fromkeys(r["kind"] for r in rows):
        chosen = [r for r in rows if r["kind"] == kind]
        out[kind] = _per_round([e for r in chosen for e in r["emitted"][1:]], width)
        out[kind]["before_eos"] = _per_round([e for r in chosen for e in before_eos(r)], width)
        out[kind]["per_prompt"] = per_prompt(chosen)
    out["all"] = {"per_prompt": per_prompt(rows)}
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    blas_note = with_chosen_blas(os.environ)  # the server's choice, before MLX loads
    if blas_note is None:
        raise SystemExit(EXIT_BAD_VALUE)
    print(blas_note, flush=True)
    from drafter.decoding import GenerationStats
    from drafter.loading import LoadOptions, load_engine
    from drafter.sampling import SamplingParams
    from server.settings import default_cache_dir

    options = LoadOptions(
        cache_dir=default_cache_dir(),
        model=args.model,
        draft_model=args.draft_model,
        draft_block_size=str(args.width),
        exactness="off",
    )
    engine = load_engine(options).engine
    spec = args.prompts_file  # read and checked as draftwise bench reads it
    kinds = spec.kinds or ("all",) * len(spec.prompts)
    rows: list[dict[str, Any]] = []
    eos_ids = engine.eos_ids
    for kind, text in zip(kinds, spec.prompts, strict=True):
        prompt = engine.tokenizer.encode(text)
        rounds = list(
            engine.generate(
                prompt, args.tokens, SamplingParams(), GenerationStats(), True, args.width
            )
        )
        emitted = [len(tokens) for tokens in rounds]
        eos_round = next((i for i, r in enumerate(rounds) if any(t.id in eos_ids for t in r)), None)
        row = {"kind": kind, "width": args.width, "prompt": text, "emitted": emitted}
        rows.append({**row, "eos_round": eos_round})
        print(kind, emitted, "first EOS in round", eos_round, flush=True)
    result = {"summary": summary(rows), "prompts": rows}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
