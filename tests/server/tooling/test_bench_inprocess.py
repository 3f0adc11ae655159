"""The in-process width sweep measures every arm on every prompt, arms interleaved, with one
Engine whose width is chosen per call."""

from __future__ import annotations

from pathlib import Path

from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import load_drafter, write_random_drafter
from drafter.engine import Engine
from server.tooling.bench_inprocess import measure_widths


def test_every_arm_generates_max_tokens_per_prompt_from_one_engine(tmp_path: Path) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    model, tokenizer = load(str(target))
    drafter = load_drafter(write_random_drafter(tmp_path / "drafter", target), model)
    engine = Engine(model, tokenizer, model_id="tiny", context_length=2048, drafter=drafter)
    progress: list[str] = []
    samples = measure_widths(
        engine, [None, 2, 4], ["ab", [1, 2, 3]], 6, n=2, warmup=0, on_progress=progress.append
    )
    assert [(s.repeat, s.prompt_index, s.width) for s in samples[:3]] == [
        (0, 0, None),
        (0, 0, 2),
        (0, 0, 4),
    ]
    assert len(samples) == len(progress) == 2 * 2 * 3
    assert all(s.tokens == 6 for s in samples)
    assert all(s.rounds == 0 for s in samples if s.width is None)
    assert all(s.rounds > 0 and s.drafted == s.rounds * (s.width - 1) for s in samples if s.width)
    assert len({s.text for s in samples if s.prompt_index == 0}) == 1  # greedy: arms agree
