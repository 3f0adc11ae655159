"""Compare drafters on the same prompts from their scripts/round_emits.py files.

The rule a new default drafter is shipped by (docs/default-pair.md): it must not accept
less than the shipped one before each prompt's first EOS, which is all a client that stops
there reads, and the figures a sweep reports (requests with `ignore_eos`) come second. This
prints both for every file against the first (the baseline), pooled over rounds and as the
mean over prompts with its range, and counts the prompts that moved up, stayed equal or
moved down before the EOS, kind by kind.

    .venv/bin/python scripts/compare_rounds.py shipped.json candidate.json [more.json ...]

Every file must hold the same prompts in the same order (else exit 2, naming the file).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_emits import before_eos  # noqa: E402

EXIT_MISMATCH = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("baseline", type=Path, help="the shipped drafter's round_emits file")
    p.add_argument("candidates", type=Path, nargs="+", help="round_emits files to compare")
    return p.parse_args(argv)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens a round over all rounds and before the EOS: pooled, and per prompt with the
    range over prompts. The prefill's token (round 0) is never a round."""
    all_rounds = [e for r in rows for e in r["emitted"][1:]]
    early_rounds = [e for r in rows for e in before_eos(r)]
    per_prompt = [_mean(r["emitted"][1:]) for r in rows if len(r["emitted"]) > 1]
    early_per_prompt = [_mean(e) for r in rows if (e := before_eos(r))]
    return {
        "pooled": _mean(all_rounds),
        "pooled_before_eos": _mean(early_rounds),
        "rounds_before_eos": len(early_rounds),
        "per_prompt": (_mean(per_prompt), min(per_prompt), max(per_prompt)),
        "per_prompt_before_eos": (
            _mean(early_per_prompt),
            min(early_per_prompt),
            max(early_per_prompt),
        ),
    }


def moved(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Prompts whose tokens a round before the EOS went up, stayed equal, went down."""
    up = equal = down = 0
    for a, b in zip(base, other, strict=True):
        before, after = _mean(before_eos(a)), _mean(before_eos(b))
        if abs(after - before) < 1e-9:
            equal += 1
        elif after > before:
            up += 1
        else:
            down += 1
    return up, equal, down


def _kinds(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["kind"] for r in rows))


def _range(figure: tuple[float, float, float]) -> str:
    return f"{figure[0]:.3f} ({figure[1]:.2f}-{figure[2]:.2f})"


def table(named: dict[str, list[dict[str, Any]]]) -> str:
    """A Markdown table: one column per file, the first the baseline. Each file's figures,
    whole and kind by kind, are computed once."""
    names = list(named)
    base = named[names[0]]
    kinds = _kinds(base)
    whole = {n: figures(named[n]) for n in names}
    by_kind = {
        n: {k: figures([r for r in named[n] if r["kind"] == k]) for k in kinds} for n in names
    }
    lines = ["| figure | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def kind_cells(key: str) -> list[str]:
        return [" / ".join(f"{by_kind[n][k][key]:.3f}" for k in kinds) for n in names]

    row("per prompt, all rounds (range)", [_range(whole[n]["per_prompt"]) for n in names])
    row(
        "per prompt, before EOS (range)",
        [_range(whole[n]["per_prompt_before_eos"]) for n in names],
    )
    row("pooled, all rounds", [f"{whole[n]['pooled']:.3f}" for n in names])
    row(
        "pooled, before EOS (rounds)",
        [f"{whole[n]['pooled_before_eos']:.3f} ({whole[n]['rounds_before_eos']})" for n in names],
    )
    row(f"pooled by kind, all rounds ({' / '.join(kinds)})", kind_cells("pooled"))
    row(f"pooled by kind, before EOS ({' / '.join(kinds)})", kind_cells("pooled_before_eos"))

    def moved_by_kind(rows: list[dict[str, Any]]) -> str:
        counts = []
        for k in kinds:
            pair = ([r for r in base if r["kind"] == k], [r for r in rows if r["kind"] == k])
            counts.append("/".join(str(n) for n in moved(*pair)))
        return ", ".join(counts)

    moved_cells = ["-"] + [moved_by_kind(named[n]) for n in names[1:]]
    row(f"prompts up/equal/down before EOS ({', '.join(kinds)})", moved_cells)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    named: dict[str, list[dict[str, Any]]] = {}
    prompts: list[str] | None = None
    for path in [args.baseline, *args.candidates]:
        rows = json.loads(path.read_text())["prompts"]
        these = [r["prompt"] for r in rows]
        if prompts is not None and these != prompts:
            print(f"{path}: not the baseline's prompts in its order", file=sys.stderr)
            raise SystemExit(EXIT_MISMATCH)
        prompts = these
        named[path.stem if path.stem not in named else str(path)] = rows
    print(table(named))


if __name__ == "__main__":
    main()
