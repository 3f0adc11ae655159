"""The shipped DFlash drafter for SmolLM2-135M-Instruct (drafter/default_pair/)."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm import load
from mlx_lm.tokenizer_utils import TokenizerWrapper

from drafter.checkpoints.smollm2 import ensure_smollm2
from drafter.decoding import GenerationStats
from drafter.dflash import load_drafter
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from server.chat import render
from server.schemas import ChatCompletionRequest, ChatMessage
from tests.drafter.published import published_weight_names

GREEDY = SamplingParams()
DRAFTER_DIR = Path(__file__).resolve().parents[2] / "drafter" / "default_pair"
LAYERS = 5
# Written for this test, so it is in no training data (which is drawn from the stdlib).
HELD_OUT_PROMPT = (
    "def moving_average(values, window):\n"
    '    """Return the averages of each run of `window` consecutive values."""\n'
    "    if window <= 0:\n"
    '        raise ValueError("window must be positive")\n'
)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, TokenizerWrapper]:
    return load(str(ensure_smollm2(tmp_path_factory.mktemp("draftwise-cache"))))


@pytest.fixture(scope="module")
def speculative(target: tuple[nn.Module, TokenizerWrapper]) -> Engine:
    model, tokenizer = target
    return Engine(
        model, tokenizer, model_id="smollm2", context_length=8192,
        drafter=load_drafter(DRAFTER_DIR, model), block_size=4,
    )  # fmt: skip


@pytest.fixture(scope="module")
def classic(target: tuple[nn.Module, TokenizerWrapper]) -> Engine:
    model, tokenizer = target
    return Engine(model, tokenizer, model_id="smollm2", context_length=8192)


def test_shipped_config_is_the_published_dflash_format() -> None:
    config = json.loads((DRAFTER_DIR / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["model_type"] == "qwen3"
    assert config["num_target_layers"] == 30
    assert config["block_size"] == 8  # trained on the widths the policy serves (2 to 8)
    assert config["num_hidden_layers"] == LAYERS
    assert (config["hidden_size"], config["vocab_size"]) == (576, 49152)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["head_dim"] == 64
    for key in ("intermediate_size", "rms_norm_eps", "rope_theta", "max_position_embeddings"):
        assert key in config
    assert config["dflash_config"] == {"mask_token_id": 16, "target_layer_ids": [1, 8, 14, 20, 27]}


def test_shipped_weights_have_exactly_the_published_names_in_bfloat16_under_50_mb() -> None:
    path = DRAFTER_DIR / "model.safetensors"
    weights = mx.load(str(path))
    assert set(weights) == published_weight_names(LAYERS)
    assert {w.dtype for w in weights.values()} == {mx.bfloat16}
    assert weights["fc.weight"].shape == (576, 5 * 576)
    assert path.stat().st_size <= 50_000_000


def test_shipped_drafter_loads_against_the_converted_target(
    target: tuple[nn.Module, TokenizerWrapper],
) -> None:
    drafter = load_drafter(DRAFTER_DIR, target[0])
    assert drafter.head_tokens == 16384  # its draft vocabulary (draft_vocab.json)
    assert load_drafter(DRAFTER_DIR, target[0], draft_vocab=False).head_tokens == 49152
    assert drafter.target_layer_ids == [1, 8, 14, 20, 27]
    assert drafter.max_width == 8
    assert drafter.mask_token_id == 16


def test_greedy_speculative_equals_classic_and_really_accepts_drafts(
    target: tuple[nn.Module, TokenizerWrapper], classic: Engine
) -> None:
    model, tokenizer = target
    drafter = load_drafter(DRAFTER_DIR, model)
    engine = Engine(
        model, tokenizer, model_id="smollm2", context_length=8192, drafter=drafter,
        block_size=8,
    )  # fmt: skip
    prompt = tokenizer.encode(HELD_OUT_PROMPT)
    stats = GenerationStats()
    speculative = [t.id for step in engine.generate(prompt, 32, GREEDY, stats) for t in step]
    reference = [t.id for step in classic.generate(prompt, 32, GREEDY) for t in step]
    assert speculative == reference
    # A trained drafter emits well over one token per round on code it never saw.
    assert stats.acceptance_length > 2.0


def test_the_chat_question_about_france_is_answered_paris_speculatively_as_classic(
    target: tuple[nn.Module, TokenizerWrapper], classic: Engine, speculative: Engine
) -> None:
    tokenizer = target[1]
    question = ChatMessage(role="user", content="What is the capital of France?")
    prompt = render(ChatCompletionRequest(messages=[question]), tokenizer).prompt
    stats = GenerationStats()
    out = [t.id for step in speculative.generate(prompt, 48, GREEDY, stats) for t in step]
    reference = [t.id for step in classic.generate(prompt, 48, GREEDY) for t in step]
    assert out == reference
    assert stats.rounds > 0
    assert "Paris" in tokenizer.decode(out)


def test_an_extraction_under_a_schema_is_valid_and_speculation_equals_classic(
    target: tuple[nn.Module, TokenizerWrapper], classic: Engine, speculative: Engine
) -> None:
    """The real pair under a JSON schema (structured output): greedy speculation gives
    classic's text, which is valid against the schema and ends by the end token."""
    from drafter.grammar import json_schema_grammar

    tokenizer = target[1]
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    params = SamplingParams(grammar=json_schema_grammar(schema))
    text = "Extract the person as JSON: Marta Kowalski is 34 and runs a bakery in Lisbon."
    question = ChatMessage(role="user", content=text)
    prompt = render(ChatCompletionRequest(messages=[question]), tokenizer).prompt
    stats = GenerationStats()
    out = [t.id for step in speculative.generate(prompt, 64, params, stats) for t in step]
    reference = [t.id for step in classic.generate(prompt, 64, params) for t in step]
    assert out == reference
    assert reference[-1] in tokenizer.eos_token_ids
    value = json.loads(tokenizer.decode(reference[:-1]))
    assert set(value) == {"name", "age"} and isinstance(value["age"], int)
    assert stats.accepted > 0
