"""ignore_eos through server.generation on both engine paths (classic and speculative)."""

from __future__ import annotations

import pytest
from mlx_lm import load

from drafter.dflash import load_drafter, write_random_drafter
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from drafter.tiny import EOS, VOCAB, write_tiny_model
from server.events import ChoicePlan, Chunk, CompletionPlan, Finished
from server.generation import run_completion

EOS_ID = VOCAB - 1
ALWAYS_EOS = SamplingParams(temperature=0.0, logit_bias={EOS_ID: 100.0})


@pytest.fixture(scope="module", params=["classic", "speculative"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    root = tmp_path_factory.mktemp("ignore-eos")
    target_dir = write_tiny_model(root / "target", "qwen3", seed=2)
    model, tokenizer = load(str(target_dir))
    drafter = width = None
    if request.param == "speculative":
        drafter_dir = write_random_drafter(root / "drafter", target_dir, num_layers=1, seed=3)
        drafter, width = load_drafter(drafter_dir, model), 4
    return Engine(
        model, tokenizer, model_id="t", context_length=2048, drafter=drafter, block_size=width
    )


def complete(engine: Engine, ignore_eos: bool, max_tokens: int = 6) -> tuple[str, Finished]:
    plan = CompletionPlan(
        prompts=[list(b"ab")],
        choices=[ChoicePlan(0, 0, ALWAYS_EOS)],
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
    )
    events: list[Chunk | Finished] = []
    run_completion(engine, plan, events.append, lambda: None)
    text = "".join(e.text for e in events if isinstance(e, Chunk))
    (finished,) = [e for e in events if isinstance(e, Finished)]
    return text, finished


def test_eos_ends_the_choice_by_default(engine: Engine):
    text, finished = complete(engine, ignore_eos=False)
    assert (finished.finish_reason, finished.completion_tokens, text) == ("stop", 1, "")


def test_with_ignore_eos_generation_runs_to_max_tokens_and_eos_is_text(engine: Engine):
    text, finished = complete(engine, ignore_eos=True)
    assert (finished.finish_reason, finished.completion_tokens) == ("length", 6)
    assert text == EOS * 6
