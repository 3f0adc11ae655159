"""Grammar-constrained decoding (drafter/grammar.py): masks per verify row, speculation
under a grammar equal to classic decode under it, batched and alone."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from drafter.acceptance import accept_greedy
from drafter.batch import BatchDecoder, run_together
from drafter.decoding import GenerationStats
from drafter.grammar import GrammarError, json_schema_grammar, masked
from drafter.sampling import SamplingParams
from tests.drafter.conftest import Pair, engine_on
from tests.drafter.test_speculative import PROMPT, ForcedDrafter

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
TOKENS = 80  # the schema's longest answer (about 50 bytes, a token each) fits


def constrained(engine_tokens: list[int], pair: Pair) -> dict[str, object]:
    eos = set(pair.tokenizer.eos_token_ids)
    assert engine_tokens[-1] in eos, "the grammar completed and only the end was left"
    value = json.loads(pair.tokenizer.decode(engine_tokens[:-1]))
    assert isinstance(value, dict)
    return value


def greedy(grammar: str) -> SamplingParams:
    return SamplingParams(grammar=grammar)


def test_a_constrained_answer_is_json_valid_against_the_schema(pair: Pair) -> None:
    grammar = json_schema_grammar(SCHEMA)
    out = [t.id for s in engine_on(pair).generate(PROMPT, TOKENS, greedy(grammar)) for t in s]
    value = constrained(out, pair)
    assert set(value) == {"name", "age", "tags"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 6
    assert isinstance(value["age"], int) and 0 <= value["age"] <= 99
    assert isinstance(value["tags"], list) and set(value["tags"]) <= {"a", "b"}


@pytest.mark.parametrize("width", [2, 4])
def test_greedy_speculation_under_a_grammar_equals_classic(pair: Pair, width: int) -> None:
    grammar = json_schema_grammar(SCHEMA)
    reference = [t.id for s in engine_on(pair).generate(PROMPT, TOKENS, greedy(grammar)) for t in s]
    for drafter in (pair.drafter, ForcedDrafter(pair.drafter, len(PROMPT), reference, 2)):
        stats = GenerationStats()
        engine = engine_on(pair, drafter, width)
        out = [t.id for s in engine.generate(PROMPT, TOKENS, greedy(grammar), stats) for t in s]
        assert out == reference
        assert stats.rounds > 0
    assert stats.accepted > 0  # the forced drafter's grammar-valid drafts were kept


def test_constrained_and_free_requests_batched_equal_their_solo_outputs(pair: Pair) -> None:
    grammar = json_schema_grammar(SCHEMA)
    engine = engine_on(pair, pair.drafter, 4)
    params = [greedy(grammar), SamplingParams(), greedy(json_schema_grammar({"type": "object"}))]
    solo = [[t.id for s in engine.generate(PROMPT, TOKENS, p) for t in s] for p in params]
    decoder = BatchDecoder(engine)
    sequences = [decoder.start(PROMPT, TOKENS, p, GenerationStats()) for p in params]
    together = [[t.id for t in out] for out in run_together(decoder, sequences)]
    assert together == solo
    constrained(solo[0], pair)


def test_row_masks_follow_the_drafts_and_leave_the_grammar_where_it_was(pair: Pair) -> None:
    engine = engine_on(pair)
    constraint = engine.constraint(json_schema_grammar({"enum": ["ab", "ac"]}))
    quote, a, b, c = (pair.tokenizer.encode(x, add_special_tokens=False)[0] for x in '"abc')
    masks = constraint.masks([quote, a])
    assert masks.shape == (3, engine.vocab_size)
    assert masks[0, quote].item() and not masks[0, a].item()  # first the opening quote
    assert masks[1, a].item() and not masks[1, b].item()
    assert masks[2, b].item() and masks[2, c].item() and not masks[2, a].item()
    assert mx.array_equal(constraint.masks([]), masks[:1]).item()  # rolled back
    refused = constraint.masks([a, b])  # `a` cannot come first
    assert mx.all(refused[1:]).item()  # rows after a refused draft are never kept
    constraint.advance([quote, a])
    assert mx.array_equal(constraint.masks([])[0], masks[2]).item()


@pytest.mark.parametrize(
    "schema", [{"type": "no-such-type"}, {"type": "string", "pattern": "("}, {"$ref": "#/nope"}]
)
def test_a_schema_that_does_not_compile_is_a_grammar_error_naming_the_problem(
    pair: Pair, schema: dict[str, object]
) -> None:
    grammars = engine_on(pair).grammars()
    with pytest.raises(GrammarError) as raised:
        grammars.compile(json_schema_grammar(schema))
    assert str(raised.value)


@pytest.mark.parametrize("seed", range(6))
def test_acceptance_from_unmasked_choices_equals_masking_every_row(pair: Pair, seed: int) -> None:
    """`Constraint.accept` fills a mask only where a row's own choice is refused; its
    accepted drafts and next token are those of every row masked and then chosen."""
    engine = engine_on(pair)
    constraint = engine.constraint(json_schema_grammar({"enum": ["ab", "ac", "abc"]}))
    quote, a, b, c = (pair.tokenizer.encode(x, add_special_tokens=False)[0] for x in '"abc')
    eos = min(pair.tokenizer.eos_token_ids)
    rng = np.random.default_rng(seed)
    favourites = [quote, a, b, c, eos]
    start = constraint.mask()
    for drafts in ([quote, a, b], [quote, a, c, quote], [a, b], [], [quote, a, b, quote, eos]):
        scores = mx.array(rng.normal(size=(len(drafts) + 1, engine.vocab_size)), mx.float32)
        top = rng.choice(favourites, size=len(drafts) + 1)
        scores = scores + 10 * mx.array(np.eye(engine.vocab_size)[top], mx.float32)
        choices = mx.argmax(masked(scores, constraint.masks(drafts)), axis=-1).tolist()
        n = accept_greedy(choices, drafts)
        filled: list[int] = []

        def masked_choice(row: int, scores: mx.array = scores, filled: list[int] = filled) -> int:
            filled.append(row)
            return int(mx.argmax(masked(scores[row], constraint.mask())).item())

        unmasked = mx.argmax(scores, axis=-1).tolist()
        assert constraint.accept(unmasked, drafts, masked_choice) == (n, choices[n])
        assert len(filled) <= 1 + len(drafts)
        assert mx.array_equal(constraint.mask(), start).item()  # the matcher left in place
