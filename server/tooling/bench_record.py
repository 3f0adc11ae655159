"""Sweep measurements in, verdicts and a record out (markdown + JSON). Pure: no I/O but write.

An arm is one server (or one engine configuration) measured n times after a
discarded warm-up. The classic arm runs first and last; its two ranges are the
drift control, and a width's verdict compares it with the union of both, so a
width is "above" only if its slowest run beats every classic run.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ABOVE, OVERLAPPING, BELOW = "above", "overlapping", "below"
RECORD_VERSION = 1


@dataclass(frozen=True)
class Request:
    """One streamed completion: timings from request start, the server's counters."""

    prompt_index: int
    tokens: int
    e2e_s: float  # request start to the last text chunk
    ttft_s: float  # request start to the first text chunk
    rounds: int  # speculative rounds; 0 when the server decoded classically
    drafted: int
    accepted: int
    sha256: str  # of this request's text


@dataclass(frozen=True)
class Run:
    """One pass over every prompt; its tok/s is total tokens over total e2e time."""

    requests: tuple[Request, ...]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def seconds(self) -> float:
        return sum(r.e2e_s for r in self.requests)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def rounds(self) -> int:
        """Decoding rounds: the server's count, or one per token for classic decode."""
        counted = sum(r.rounds for r in self.requests)
        return counted if counted else self.tokens

    @property
    def drafted(self) -> int:
        return sum(r.drafted for r in self.requests)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.requests)

    @property
    def text_sha256(self) -> tuple[str, ...]:
        return tuple(r.sha256 for r in self.requests)


@dataclass(frozen=True)
class Range:
    low: float
    median: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Range:
        if not values:
            raise ValueError("a range needs at least one value")
        return cls(min(values), statistics.median(values), max(values))

    def union(self, other: Range) -> Range:
        median = statistics.median([self.median, other.median])
        return Range(min(self.low, other.low), median, max(self.high, other.high))

    def describe(self, digits: int = 2) -> str:
        return f"{self.low:.{digits}f}-{self.high:.{digits}f}"


def verdict(arm: Range, classic: Range) -> str:
    """above / below classic only with disjoint ranges; anything touching overlaps."""
    if arm.low > classic.high:
        return ABOVE
    if arm.high < classic.low:
        return BELOW
    return OVERLAPPING


@dataclass
class Arm:
    """One server configuration: classic (width None) or a draft block width."""

    label: str
    width: int | None
    runs: list[Run]
    warmup: list[Run] = field(default_factory=list)
    served: dict[str, Any] = field(default_factory=dict)  # what /health said it served

    def tok_s(self) -> Range:
        return Range.of([run.tok_s for run in self.runs])

    def text_sha256(self) -> tuple[str, ...]:
        return self.runs[0].text_sha256

    def stable(self) -> bool:
        """Every run (warm-up included) produced the same text."""
        return len({run.text_sha256 for run in [*self.warmup, *self.runs]}) == 1

    def counters(self) -> dict[str, float | None]:
        rounds = sum(run.rounds for run in self.runs)
        tokens = sum(run.tokens for run in self.runs)
        seconds = sum(run.seconds for run in self.runs)
        accepted = sum(run.accepted for run in self.runs)
        speculative = sum(r.rounds for run in self.runs for r in run.requests) > 0
        return {
            "rounds_per_run": rounds / len(self.runs),
            # mean accepted drafts + the bonus token, per round (DFlash's "acceptance length")
            "acceptance_length": (accepted + rounds) / rounds if speculative else None,
            "emitted_per_round": tokens / rounds,
            "time_per_round_ms": 1000.0 * seconds / rounds,
            "ttft_ms": 1000.0
            * statistics.median(r.ttft_s for run in self.runs for r in run.requests),
        }


def classic_control(first: Arm, last: Arm) -> dict[str, Any]:
    """The drift control: both classic ranges, their union and the drift of the medians."""
    a, b = first.tok_s(), last.tok_s()
    return {
        "first": asdict(a),
        "last": asdict(b),
        "union": asdict(a.union(b)),
        "drift": (b.median - a.median) / a.median if a.median else 0.0,
        "overlapping": verdict(a, b) == OVERLAPPING,
    }


def arm_summary(arm: Arm, classic: Range, classic_sha: tuple[str, ...]) -> dict[str, Any]:
    tok_s = arm.tok_s()
    summary: dict[str, Any] = {
        "label": arm.label,
        "width": arm.width,
        "tok_s": asdict(tok_s),
        "tok_s_runs": [run.tok_s for run in arm.runs],
        "speedup": tok_s.median / classic.median if classic.median else None,
        "verdict": None if arm.width is None else verdict(tok_s, classic),
        "identical_to_classic": arm.text_sha256() == classic_sha,
        "stable": arm.stable(),
        "sha256": list(arm.text_sha256()),
        "tokens_per_run": arm.runs[0].tokens,
        **arm.counters(),
        "served": arm.served,
        "runs": [[asdict(r) for r in run.requests] for run in arm.runs],
        "warmup": [[asdict(r) for r in run.requests] for run in arm.warmup],
    }
    served_width = arm.served.get("block_size") if arm.served.get("speculative") else None
    if arm.width is not None and "speculative" in arm.served and served_width != arm.width:
        summary["verdict"] = f"not served at width {arm.width} (served {served_width})"
    return summary


def build_record(
    *,
    name: str,
    arms: Sequence[Arm],
    setup: dict[str, Any],
    host: dict[str, Any],
) -> dict[str, Any]:
    """The record. Server sweeps: arms[0] and arms[-1] are the classic control, widths in
    between. Interleaved (in-process) sweeps: only arms[0] is classic, its runs interleaved
    with every width's in each repetition, so there is no separate last control arm."""
    first, last = arms[0], arms[-1]
    if first.width is not None:
        raise ValueError("a sweep starts with the classic arm")
    if last.width is None and len(arms) > 1:
        control = classic_control(first, last)
        control["arm"] = "classic (--draft-model none), first and last"
    else:
        whole = asdict(first.tok_s())
        control = {"first": whole, "last": None, "union": whole, "drift": None}
        control["overlapping"] = None
        control["arm"] = "classic, interleaved with every width in each repetition"
    classic = Range(**control["union"])
    classic_sha = first.text_sha256()
    return {
        "record_version": RECORD_VERSION,
        "name": name,
        "host": host,
        "setup": setup,
        "n": len(first.runs),
        "warmup": len(first.warmup),
        "control": control,
        "arms": [arm_summary(arm, classic, classic_sha) for arm in arms],
    }


def best_width(record: dict[str, Any]) -> int | None:
    """The fastest width that is above classic and byte-identical to it, or None."""
    winners = [
        arm
        for arm in record["arms"]
        if arm["width"] is not None and arm["verdict"] == ABOVE and arm["identical_to_classic"]
    ]
    if not winners:
        return None
    return max(winners, key=lambda arm: arm["tok_s"]["median"])["width"]


def all_widths_lose(record: dict[str, Any]) -> bool:
    """Every width is below classic, or not byte-identical to it."""
    widths = [arm for arm in record["arms"] if arm["width"] is not None]
    return bool(widths) and all(
        arm["verdict"] == BELOW or not arm["identical_to_classic"] for arm in widths
    )


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(record: dict[str, Any]) -> str:
    host, setup, control = record["host"], record["setup"], record["control"]
    lines = [
        f"# Width sweep: {record['name']}",
        "",
        f"Measured {setup.get('started', '?')} with:",
        "",
        *[f"    {line}" for line in str(setup.get("command", "draftwise bench")).splitlines()],
        "",
        "## Host",
        "",
        *[f"- {key}: {value}" for key, value in host.items()],
        "",
        "## Setup",
        "",
        *[
            f"- {key}: {json.dumps(value) if isinstance(value, (list, dict)) else value}"
            for key, value in setup.items()
            if key not in ("started", "command")
        ],
        f"- n: {record['n']} per arm after {record['warmup']} discarded warm-up",
        "",
        "## Results (e2e tok/s, request start to last chunk)",
        "",
        "| arm | served width | tok/s range | median | vs classic | verdict | acceptance length "
        "| emitted/round | ms/round | text identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in record["arms"]:
        tok_s = Range(**arm["tok_s"])
        served = arm["served"].get("block_size") if arm["served"].get("speculative") else None
        lines.append(
            f"| {arm['label']} | {served or 'classic'} | {tok_s.describe()} | "
            f"{tok_s.median:.2f} | {_fmt(arm['speedup'])}x | {arm['verdict'] or 'control'} | "
            f"{_fmt(arm['acceptance_length'])} | {_fmt(arm['emitted_per_round'])} | "
            f"{_fmt(arm['time_per_round_ms'], 1)} | "
            f"{'yes' if arm['identical_to_classic'] else 'NO'}"
            f"{'' if arm['stable'] else ' (unstable)'} |"
        )
    lines += ["", control_sentence(control), ""]
    lines += per_kind_table(record)
    lines += per_prompt_table(record)
    lines += [
        "Acceptance length is (accepted drafts + bonus tokens) / rounds from the server's "
        "counters in `usage.draftwise` (in-process: the engine's); emitted/round is "
        "completion tokens / rounds; ms/round is e2e time / rounds (prefill included); "
        "classic decode counts one round per token.",
        "",
        f"Byte identity: sha256 of each arm's text per prompt, classic `{_sha(record)}`. "
        "JSON next to this file has every request.",
        "",
    ]
    return "\n".join(lines)


def requests_of(arm: dict[str, Any], prompt_indices: Collection[int]) -> list[dict[str, Any]]:
    """The timed requests of a record's arm for these prompts."""
    return [r for run in arm["runs"] for r in run if r["prompt_index"] in prompt_indices]


def acceptance_of(requests: Sequence[dict[str, Any]]) -> float | None:
    """(accepted + rounds) / rounds pooled over requests; None when none was speculative."""
    rounds = sum(r["rounds"] for r in requests)
    return (sum(r["accepted"] for r in requests) + rounds) / rounds if rounds else None


def tok_s_of(requests: Sequence[dict[str, Any]]) -> float | None:
    seconds = sum(r["e2e_s"] for r in requests)
    return sum(r["tokens"] for r in requests) / seconds if seconds else None


def per_prompt_table(record: dict[str, Any]) -> list[str]:
    """Acceptance length and tok/s by prompt, when the sweep has more than one prompt."""
    prompts = record["setup"].get("prompts") or []
    if len(prompts) < 2:
        return []
    header = " | ".join(f"prompt {i + 1}: acceptance, tok/s" for i in range(len(prompts)))
    lines = ["## By prompt", "", f"| arm | {header} |", "|---" * (len(prompts) + 1) + "|"]
    for arm in record["arms"]:
        cells = []
        for index in range(len(prompts)):
            requests = requests_of(arm, {index})
            cells.append(f"{_fmt(acceptance_of(requests))}, {_fmt(tok_s_of(requests))}")
        lines.append(f"| {arm['label']} | {' | '.join(cells)} |")
    starts = "; ".join(f"prompt {i + 1}: {json.dumps(p[:60])}..." for i, p in enumerate(prompts))
    return [*lines, "", f"Prompts (full text in Setup): {starts}", ""]


def per_kind_table(record: dict[str, Any]) -> list[str]:
    """Acceptance length and tok/s by prompt kind, when the prompts file names kinds:
    pooled over the kind's requests, with the range of its prompts' acceptance."""
    kinds = record["setup"].get("prompt_kinds")
    if not kinds:
        return []
    order = list(dict.fromkeys(kinds))
    header = " | ".join(f"{k} ({kinds.count(k)}): acceptance [range], tok/s" for k in order)
    lines = ["## By kind", "", f"| arm | {header} |", "|---" * (len(order) + 1) + "|"]
    for arm in record["arms"]:
        cells = []
        for kind in order:
            indices = [i for i, k in enumerate(kinds) if k == kind]
            requests = requests_of(arm, indices)
            each = [a for i in indices if (a := acceptance_of(requests_of(arm, {i}))) is not None]
            spread = f" [{min(each):.2f}-{max(each):.2f}]" if each else ""
            cells.append(f"{_fmt(acceptance_of(requests))}{spread}, {_fmt(tok_s_of(requests))}")
        lines.append(f"| {arm['label']} | {' | '.join(cells)} |")
    return [
        *lines,
        "",
        "Acceptance per kind: all its requests' (accepted + rounds) / rounds; "
        "the range is over its prompts.",
        "",
    ]


def control_sentence(control: dict[str, Any]) -> str:
    first = Range(**control["first"])
    if control["last"] is None:
        return (
            f"Control: classic {first.describe()} tok/s, {control['arm']}. Verdicts compare "
            "each width's range with it: above/below only when disjoint."
        )
    last = Range(**control["last"])
    apart = "" if control["overlapping"] else " (the two control ranges do not overlap)"
    return (
        f"Control: classic first {first.describe()} tok/s, last {last.describe()} tok/s, "
        f"drift of the median {100 * control['drift']:+.1f}%{apart}. Verdicts compare each "
        "width's range with the union of both control ranges: above/below only when disjoint."
    )


def _sha(record: dict[str, Any]) -> str:
    return ", ".join(sha[:16] for sha in record["arms"][0]["sha256"])


def write_record(record: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write <name>.md and <name>.json under out_dir; return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{record['name']}.md", out_dir / f"{record['name']}.json"
    md.write_text(render_markdown(record))
    js.write_text(json.dumps(record, indent=2) + "\n")
    return md, js
