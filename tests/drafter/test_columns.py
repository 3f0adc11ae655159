"""The tied LM head through a contiguous (H, V) copy (drafter/columns.py): same
logits, the swap is by class and reversible, and the engine uses it on CPU only
while rowwise products are off."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from drafter.columns import ColumnsEmbedding, set_column_head
from drafter.dflash import target_embedding
from drafter.rowwise import RowwiseEmbedding
from tests.drafter.conftest import Pair


def test_the_column_head_gives_the_tied_heads_logits_and_keeps_one_copy() -> None:
    model = nn.Sequential(nn.Embedding(50, 16))
    embedding = model.layers[0]
    x = mx.random.normal((1, 3, 16), key=mx.random.key(1))
    want = embedding.as_linear(x)
    assert set_column_head(model, True) == 1 and type(embedding) is ColumnsEmbedding
    assert mx.allclose(embedding.as_linear(x), want, atol=1e-5).item()
    columns = embedding.__dict__["_columns"]
    assert mx.array_equal(columns, embedding.weight.T).item()
    embedding.as_linear(x)
    assert embedding.__dict__["_columns"] is columns  # made once
    assert [name for name, _ in tree_flatten(model.parameters())] == ["layers.0.weight"]
    assert set_column_head(model, False) == 1 and type(embedding) is nn.Embedding
    assert "_columns" not in embedding.__dict__


def test_the_engine_uses_the_column_head_on_cpu_unless_rowwise_products_are_on(
    pair: Pair,
) -> None:
    from drafter.engine import Engine

    engine = Engine(pair.model, pair.tokenizer, model_id="tiny", context_length=2048)
    embedding = pair.model.model.embed_tokens
    assert type(embedding) is ColumnsEmbedding  # the tests run on MLX's CPU backend
    engine.rowwise_linear = True
    assert type(embedding) is RowwiseEmbedding
    engine.rowwise_linear = False
    assert type(embedding) is ColumnsEmbedding


def test_a_full_draft_head_multiplies_by_the_layout_the_target_has_now(pair: Pair) -> None:
    assert pair.drafter.draft_vocab is None  # a random drafter scores the whole vocabulary
    embedding = target_embedding(pair.model)
    hidden = mx.random.normal((1, 2, embedding.weight.shape[1]), key=mx.random.key(4))
    set_column_head(pair.model, False)
    want = pair.drafter.head(hidden)
    set_column_head(pair.model, True)  # after the drafter was made, as the engine does
    got = pair.drafter.head(hidden)
    assert "_columns" in embedding.__dict__  # it multiplied by the column copy
    assert mx.allclose(got, want, atol=1e-5).item()
