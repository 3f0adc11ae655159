"""The DFlash drafter module: published checkpoint format, loading, validation, caching."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import (
    ARCHITECTURE,
    DFlashDraftModel,
    DrafterError,
    ModelArgs,
    RestrictedHead,
    build_target_layer_ids,
    load_drafter,
    save_drafter,
    write_random_drafter,
)
from tests.drafter.published import published_weight_names


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("target") / "qwen3", "qwen3", seed=1)


@pytest.fixture(scope="module")
def target(target_dir: Path) -> nn.Module:
    return load(str(target_dir))[0]


@pytest.fixture
def drafter_dir(tmp_path: Path, target_dir: Path) -> Path:
    return write_random_drafter(tmp_path / "drafter", target_dir, num_layers=2, block_size=8)


def edit_config(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def features(length: int, width: int, seed: int) -> mx.array:
    return mx.random.normal((1, length, width), key=mx.random.key(seed))


def test_saved_checkpoint_uses_the_published_config_layout(drafter_dir: Path) -> None:
    config = json.loads((drafter_dir / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    assert config["model_type"] == "qwen3"
    assert config["num_target_layers"] == 4
    assert config["block_size"] == 8
    assert config["dflash_config"] == {"mask_token_id": 256, "target_layer_ids": [1, 2]}
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (64, 2, 16)


def test_saved_checkpoint_uses_exactly_the_published_weight_names(drafter_dir: Path) -> None:
    names = set(mx.load(str(drafter_dir / "model.safetensors")))
    assert names == published_weight_names(2)


def test_fc_projects_the_concatenated_tapped_layers(drafter_dir: Path) -> None:
    weights = mx.load(str(drafter_dir / "model.safetensors"))
    assert weights["fc.weight"].shape == (64, 2 * 64)


def test_loaded_drafter_reproduces_the_saved_model(tmp_path: Path, target: nn.Module) -> None:
    args = ModelArgs(
        hidden_size=64,
        num_hidden_layers=1,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        vocab_size=257,
        target_layer_ids=[0, 3],
        mask_token_id=5,
        num_target_layers=4,
    )
    mx.random.seed(3)
    model = DFlashDraftModel(args)
    drafter = load_drafter(save_drafter(tmp_path / "d", model, args), target)
    context = features(6, 128, seed=0)
    block = drafter.embed(mx.array([[7, 5, 5, 5]]))
    expected = model(block, [context], [model.make_cache()])
    assert mx.array_equal(drafter.model(block, [context], [drafter.make_cache()]), expected)
    assert (drafter.mask_token_id, drafter.target_layer_ids, drafter.block_size) == (5, [0, 3], 16)


def test_block_size_inside_dflash_config_is_read(drafter_dir: Path, target: nn.Module) -> None:
    config = json.loads((drafter_dir / "config.json").read_text())
    del config["block_size"]
    config["dflash_config"]["block_size"] = 4
    (drafter_dir / "config.json").write_text(json.dumps(config))
    assert load_drafter(drafter_dir, target).block_size == 4


def test_draft_scores_cover_the_rows_after_the_anchor(drafter_dir: Path, target: nn.Module) -> None:
    drafter = load_drafter(drafter_dir, target)
    drafted = drafter.draft_scores(3, features(5, 128, seed=1), drafter.make_cache(), width=4)
    assert drafted.logits().shape == (3, 257) and drafted.tokens().shape == (3,)


def test_context_cached_over_calls_equals_context_given_at_once(
    drafter_dir: Path, target: nn.Module
) -> None:
    drafter = load_drafter(drafter_dir, target)
    context = features(9, 128, seed=2)
    cache = drafter.make_cache()
    drafter.draft_scores(1, context[:, :5], cache, width=4)
    incremental = drafter.draft_scores(2, context[:, 5:], cache, width=4).logits()
    at_once = drafter.draft_scores(2, context, drafter.make_cache(), width=4).logits()
    assert cache[0].offset == 9
    assert mx.allclose(incremental, at_once, atol=1e-5).item()


def test_block_attention_is_not_causal(drafter_dir: Path, target: nn.Module) -> None:
    drafter = load_drafter(drafter_dir, target)
    context = features(4, 128, seed=3)
    block = drafter.embed(mx.array([[1, 256, 256, 256]]))
    changed_last = block.at[:, 3].add(1.0)
    first = drafter.model(block, [context], [drafter.make_cache()])
    second = drafter.model(changed_last, [context], [drafter.make_cache()])
    assert not mx.allclose(first[:, 1], second[:, 1]).item()


def test_positions_are_absolute(drafter_dir: Path, target: nn.Module) -> None:
    drafter = load_drafter(drafter_dir, target)
    context = features(4, 128, seed=4)
    fresh = drafter.draft_scores(1, context, drafter.make_cache(), width=3).logits()
    shifted_cache = drafter.make_cache()
    drafter.draft_scores(1, features(3, 128, seed=5), shifted_cache, width=3)
    shifted = drafter.draft_scores(1, context, shifted_cache, width=3).logits()
    assert not mx.allclose(fresh, shifted).item()


def test_quantized_drafter_loads_as_quantized_layers(tmp_path: Path, target_dir: Path) -> None:
    target = load(str(target_dir))[0]
    quantization = {"group_size": 32, "bits": 4, "mode": "affine"}
    path = write_random_drafter(tmp_path / "q", target_dir, quantization=quantization)
    assert json.loads((path / "config.json").read_text())["quantization"] == quantization
    drafter = load_drafter(path, target)
    assert isinstance(drafter.model.fc, nn.QuantizedLinear)
    assert isinstance(drafter.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    drafted = drafter.draft_scores(1, features(3, 128, seed=6), drafter.make_cache(), width=4)
    logits = drafted.logits()
    assert logits.shape == (3, 257) and mx.isfinite(logits).all().item()


def test_published_default_target_layers() -> None:
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert build_target_layer_ids(28, 1) == [14]


def test_refuses_drafter_whose_hidden_size_differs(tmp_path: Path, target: nn.Module) -> None:
    narrow = write_tiny_model(tmp_path / "narrow", "qwen3", overrides={"hidden_size": 32})
    path = write_random_drafter(tmp_path / "d", narrow)
    with pytest.raises(DrafterError, match="hidden_size 32 != target hidden size 64"):
        load_drafter(path, target)


def test_refuses_drafter_whose_vocabulary_differs(drafter_dir: Path, target: nn.Module) -> None:
    edit_config(drafter_dir, vocab_size=300)
    with pytest.raises(DrafterError, match="vocab_size 300 != target vocabulary 257"):
        load_drafter(drafter_dir, target)


def test_refuses_target_layer_ids_beyond_the_target(drafter_dir: Path, target: nn.Module) -> None:
    edit_config(drafter_dir, dflash_config={"mask_token_id": 0, "target_layer_ids": [1, 4]})
    with pytest.raises(DrafterError, match=r"target_layer_ids \[1, 4\] .* depth 4"):
        load_drafter(drafter_dir, target)


def test_refuses_drafter_trained_for_another_depth(drafter_dir: Path, target: nn.Module) -> None:
    edit_config(drafter_dir, num_target_layers=36)
    with pytest.raises(DrafterError, match="num_target_layers 36 != target depth 4"):
        load_drafter(drafter_dir, target)


def test_refuses_a_directory_without_config(tmp_path: Path, target: nn.Module) -> None:
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(DrafterError, match="missing config.json"):
        load_drafter(tmp_path / "empty", target)


def test_refuses_a_missing_directory(tmp_path: Path, target: nn.Module) -> None:
    with pytest.raises(DrafterError, match="not a directory"):
        load_drafter(tmp_path / "nowhere", target)


def test_refuses_malformed_config_json(drafter_dir: Path, target: nn.Module) -> None:
    (drafter_dir / "config.json").write_text("{not json")
    with pytest.raises(DrafterError, match="malformed JSON"):
        load_drafter(drafter_dir, target)


def test_refuses_a_config_that_is_not_dflash(drafter_dir: Path, target: nn.Module) -> None:
    edit_config(drafter_dir, architectures=["Qwen3ForCausalLM"])
    with pytest.raises(DrafterError, match="lack 'DFlashDraftModel'"):
        load_drafter(drafter_dir, target)


def test_refuses_a_config_without_dflash_config(drafter_dir: Path, target: nn.Module) -> None:
    config = json.loads((drafter_dir / "config.json").read_text())
    del config["dflash_config"]
    (drafter_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(DrafterError, match="missing dflash_config"):
        load_drafter(drafter_dir, target)


def test_refuses_a_config_missing_dimensions(drafter_dir: Path, target: nn.Module) -> None:
    config = json.loads((drafter_dir / "config.json").read_text())
    del config["intermediate_size"]
    (drafter_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(DrafterError, match="missing intermediate_size"):
        load_drafter(drafter_dir, target)


def test_refuses_missing_weights(drafter_dir: Path, target: nn.Module) -> None:
    (drafter_dir / "model.safetensors").unlink()
    with pytest.raises(DrafterError, match="no \\*.safetensors weights"):
        load_drafter(drafter_dir, target)


def test_refuses_corrupt_weights(drafter_dir: Path, target: nn.Module) -> None:
    (drafter_dir / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(DrafterError, match="malformed safetensors"):
        load_drafter(drafter_dir, target)


def test_refuses_weights_that_miss_a_layer(drafter_dir: Path, target: nn.Module) -> None:
    weights = mx.load(str(drafter_dir / "model.safetensors"))
    del weights["layers.1.mlp.up_proj.weight"]
    mx.save_safetensors(str(drafter_dir / "model.safetensors"), weights)
    with pytest.raises(DrafterError, match="layers.1.mlp.up_proj.weight"):
        load_drafter(drafter_dir, target)


def test_refuses_weights_of_the_wrong_shape(drafter_dir: Path, target: nn.Module) -> None:
    edit_config(drafter_dir, intermediate_size=96)
    with pytest.raises(DrafterError, match="weights do not match config"):
        load_drafter(drafter_dir, target)


def write_draft_vocab(path: Path, ids: list[int]) -> None:
    (path / "draft_vocab.json").write_text(json.dumps({"token_ids": ids}))


def test_a_draft_vocabulary_restricts_drafts_to_its_tokens(
    drafter_dir: Path, target: nn.Module
) -> None:
    vocab = target.model.embed_tokens.weight.shape[0]
    ids = list(range(0, vocab, 3))
    write_draft_vocab(drafter_dir, ids)
    full = load_drafter(drafter_dir, target, draft_vocab=False)
    restricted = load_drafter(drafter_dir, target)
    assert full.draft_vocab is None and restricted.draft_vocab == ids
    context = features(5, 2 * target.model.embed_tokens.weight.shape[1], seed=7)
    want = full.draft_scores(3, context, full.make_cache(), 6).logits()
    drafted = restricted.draft_scores(3, context, restricted.make_cache(), 6)
    got = drafted.logits()
    inside = mx.array(ids)
    assert mx.allclose(got[:, inside], want[:, inside], atol=1e-5).item()
    outside = mx.array(sorted(set(range(vocab)) - set(ids)))
    assert mx.all(got[:, outside] == -mx.inf).item()
    # the greedy drafts, read from the restricted scores, are the full row's argmax
    assert drafted.tokens().tolist() == mx.argmax(got, axis=-1).tolist()
    assert set(drafted.tokens().tolist()) <= set(ids)


def test_the_draft_head_multiplies_by_a_contiguous_copy_of_its_rows_transposed(
    drafter_dir: Path, target: nn.Module
) -> None:
    """On CPU the restricted head scores through an (H, N) copy of its gathered rows
    (OpenBLAS multiplies a few rows by it faster); the copy is those rows, and the
    scores are the row layout's."""
    vocab = target.model.embed_tokens.weight.shape[0]
    ids = list(range(1, vocab, 2))
    write_draft_vocab(drafter_dir, ids)
    head = load_drafter(drafter_dir, target).head
    assert isinstance(head, RestrictedHead)
    columns = head.columns()
    assert columns.shape == (head.weight.shape[1], len(ids))
    assert mx.array_equal(columns, target.model.embed_tokens.weight[mx.array(ids)].T).item()
    assert head.columns() is columns  # made once
    hidden = mx.random.normal((1, 3, columns.shape[0]), key=mx.random.key(3))
    scores = head(hidden)
    assert mx.allclose(scores, hidden @ head.weight.T, atol=1e-5).item()


def test_a_checkpoint_with_a_draft_vocabulary_loads_where_it_is_ignored(
    drafter_dir: Path, target: nn.Module
) -> None:
    """The published loader reads config.json and *.safetensors only: the extra file
    changes nothing for it."""
    write_draft_vocab(drafter_dir, [0, 1, 2])
    plain = load_drafter(drafter_dir, target, draft_vocab=False)
    assert plain.draft_vocab is None
    assert (
        plain.draft_scores(1, features(3, plain.model.fc.weight.shape[1], 1), plain.make_cache(), 4)
        .logits()
        .shape[-1]
        == (target.model.embed_tokens.weight.shape[0])
    )


def test_refuses_a_malformed_draft_vocabulary(drafter_dir: Path, target: nn.Module) -> None:
    write_draft_vocab(drafter_dir, [-1, 5])
    with pytest.raises(DrafterError, match="draft_vocab.json"):
        load_drafter(drafter_dir, target)


def test_a_batched_draft_equals_each_requests_own_draft(
    drafter_dir: Path, target: nn.Module
) -> None:
    """Requests with different context lengths (and different cached context) drafted
    in one forward get what each gets alone."""
    drafter = load_drafter(drafter_dir, target)
    contexts = [features(n, 128, seed=10 + n) for n in (3, 9, 1)]
    alone_caches = [drafter.make_cache() for _ in contexts]
    batch_caches = [drafter.make_cache() for _ in contexts]
    for cache_set in (alone_caches, batch_caches):  # some context already cached
        for cache, context in zip(cache_set, contexts, strict=True):
            drafter.draft_scores(1, context, cache, width=4)
    more = [features(n, 128, seed=20 + n) for n in (2, 1, 5)]
    alone = [
        drafter.draft_scores(a, f, c, width=4).logits()
        for a, f, c in zip([4, 8, 9], more, alone_caches, strict=True)
    ]
    batched = drafter.draft_scores_batch([4, 8, 9], more, batch_caches, width=4)
    assert batched.logits().shape == (3, 3, 257)
    for b in range(3):
        assert mx.allclose(batched[b].logits(), alone[b], atol=1e-5).item()
        assert batch_caches[b][0].offset == alone_caches[b][0].offset
