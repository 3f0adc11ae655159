"""The tied LM head through a contiguous (H, V) copy (drafter/columns.py): same
logits, the swap is by class and reversible, and a full draft head follows the
target's layout."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from drafter.columns import ColumnsEmbedding
from drafter.dflash import target_embedding
from drafter.forward import set_linear
from tests.drafter.conftest import Pair


def test_the_column_head_gives_the_tied_heads_logits_and_keeps_one_copy() -> None:
    model = nn.Sequential(nn.Embedding(50, 16))
    embedding = model.layers[0]
    x = mx.random.normal((1, 3, 16), key=mx.random.key(1))
    want = embedding.as_linear(x)
    assert set_linear(model, "columns") == 1 and type(embedding) is ColumnsEmbedding
    assert mx.allclose(embedding.as_linear(x), want, atol=1e-5).item()
    columns = embedding.__dict__["_columns"]
    assert mx.array_equal(columns, embedding.weight.T).item()
    embedding.as_linear(x)
    assert embedding.__dict__["_columns"] is columns  # made once
    assert [name for name, _ in tree_flatten(model.parameters())] == ["layers.0.weight"]
    assert set_linear(model, "matrix") == 0 and type(embedding) is nn.Embedding
    assert "_columns" not in embedding.__dict__


def test_a_full_draft_head_multiplies_by_the_layout_the_target_has_now(pair: Pair) -> None:
    assert pair.drafter.draft_vocab is None  # a random drafter scores the whole vocabulary
    embedding = target_embedding(pair.model)
    hidden = mx.random.normal((1, 2, embedding.weight.shape[1]), key=mx.random.key(4))
    set_linear(pair.model, "matrix")
    want = pair.drafter.head(hidden)
    set_linear(pair.model, "columns")  # after the drafter was made, as the engine does
    got = pair.drafter.head(hidden)
    assert "_columns" in embedding.__dict__  # it multiplied by the column copy
    assert mx.allclose(got, want, atol=1e-5).item()
