"""Convert a llama-architecture GGUF file into an mlx-lm model directory.

Reads the GGUF with the `gguf` package, dequantizes every tensor, maps llama.cpp
names back to the Hugging Face llama layout, undoes llama.cpp's q/k row
permutation, rebuilds the byte-level BPE tokenizer from the GGUF metadata, and
writes config.json, safetensors and tokenizer files that `mlx_lm.load` accepts.
The directory is written to a temporary sibling and renamed into place, so a
crash never leaves a half-written model behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from gguf import GGUFReader
from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

from drafter.checkpoints.gguf_layout import llama_weights
from drafter.files import write_dir_atomically

DTYPES: dict[str, mx.Dtype] = {
    "float32": mx.float32,
    "bfloat16": mx.bfloat16,
    "float16": mx.float16,
}
QUANT_BITS = (2, 3, 4, 5, 6, 8)
# The GGUF stores its matrices as Q4_1: blocks of 32 weights along the input axis with
# a scale and a minimum, which is MLX's affine mode at group size 32 (w = scale * q +
# bias). Re-quantizing the dequantized blocks at g32 finds the same grid (Q4_1 uses
# q = 0 and q = 15 in each block), so a 4-bit target is the same model; g64 merged two
# blocks into one grid and failed the Paris check. The token embedding (Q8_0 there, and
# the tied LM head) stays at 8 bits.
QUANT_GROUP_SIZE = 32
QUANT_MODE = "affine"
EMBEDDING_BITS = 8

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# llama.cpp pre-tokenizer names whose split rules are
# `\p{N}` then the GPT-2 regex: individual digits, then byte-level GPT-2 splitting.
_STARCODER_FAMILY = {"smollm", "starcoder", "refact", "codeshell"}


def read_gguf(path: Path) -> GGUFReader:
    return GGUFReader(str(path))


def field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    if key not in reader.fields:
        if default is not None:
            return default
        raise KeyError(f"GGUF metadata has no {key!r}")
    return reader.fields[key].contents()


def _float32_clean(value: float) -> float:
    # GGUF stores floats as float32: 1e-5 reads back as 9.999999747378752e-06.
    return float(f"{value:.7g}")


def llama_config(reader: GGUFReader) -> dict[str, Any]:
    """Build an HF/mlx-lm llama config.json from the GGUF metadata."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"only llama GGUF files are supported, got architecture {arch!r}")
    hidden = int(field(reader, "llama.embedding_length"))
    heads = int(field(reader, "llama.attention.head_count"))
    head_dim = int(field(reader, "llama.rope.dimension_count", hidden // heads))
    names = {t.name for t in reader.tensors}
    eos = int(field(reader, "tokenizer.ggml.eos_token_id"))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(field(reader, "llama.block_count")),
        "intermediate_size": int(field(reader, "llama.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _float32_clean(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": _float32_clean(field(reader, "llama.rope.freq_base", 10000.0)),
        "rope_traditional": False,
        "max_position_embeddings": int(field(reader, "llama.context_length")),
        "vocab_size": len(field(reader, "tokenizer.ggml.tokens")),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": int(field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": eos,
        "pad_token_id": int(field(reader, "tokenizer.ggml.padding_token_id", eos)),
    }


def _pre_tokenizer(pre: str) -> dict[str, Any]:
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    if pre in _STARCODER_FAMILY:
        digits = {"type": "Digits", "individual_digits": True}
        return {"type": "Sequence", "pretokenizers": [digits, byte_level]}
    if pre in {"gpt2", "default"}:
        return byte_level
    raise ValueError(f"unsupported tokenizer.ggml.pre {pre!r}")


def tokenizer_json(reader: GGUFReader) -> dict[str, Any]:
    """A `tokenizers` tokenizer.json for a GGUF `gpt2` (byte-level BPE) vocabulary."""
    kind = field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"only byte-level BPE (gpt2) tokenizers are supported, got {kind!r}")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [m.split(" ") for m in field(reader, "tokenizer.ggml.merges")]
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": kind_ == TOKEN_TYPE_CONTROL,
        }
        for i, (tok, kind_) in enumerate(zip(tokens, types, strict=True))
        if kind_ in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": _pre_tokenizer(field(reader, "tokenizer.ggml.pre", "default")),
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": False,
            "use_regex": True,
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }


def tokenizer_files(reader: GGUFReader) -> dict[str, dict[str, Any]]:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json contents."""
    tokens = field(reader, "tokenizer.ggml.tokens")
    eos_id = int(field(reader, "tokenizer.ggml.eos_token_id"))

    def token(key: str, fallback: int) -> str:
        return tokens[int(field(reader, key, fallback))]

    special = {
        "bos_token": token("tokenizer.ggml.bos_token_id", eos_id),
        "eos_token": tokens[eos_id],
        "pad_token": token("tokenizer.ggml.padding_token_id", eos_id),
        "unk_token": token("tokenizer.ggml.unknown_token_id", eos_id),
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length")),
    }
    if "tokenizer.chat_template" in reader.fields:
        config["chat_template"] = field(reader, "tokenizer.chat_template")
    return {
        "tokenizer.json": tokenizer_json(reader),
        "tokenizer_config.json": config,
        "special_tokens_map.json": special,
    }


def _build_model(
    config: dict[str, Any], weights: dict[str, np.ndarray], dtype: mx.Dtype
) -> nn.Module:
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    arrays = [(name, mx.array(value).astype(dtype)) for name, value in weights.items()]
    model.load_weights(arrays, strict=True)
    mx.eval(model.parameters())
    return model


def write_model_dir(
    reader: GGUFReader, out_dir: Path, dtype: str = "float32", quantize_bits: int | None = None
) -> None:
    """Write a complete mlx-lm model directory into `out_dir` (not atomic by itself)."""
    config = llama_config(reader)
    config["torch_dtype"] = dtype
    model = _build_model(config, llama_weights(reader, config), DTYPES[dtype])
    if quantize_bits is not None:
        model, config = quantize_model(
            model,
            config,
            QUANT_GROUP_SIZE,
            quantize_bits,
            mode=QUANT_MODE,
            quant_predicate=keep_embedding_bits(quantize_bits),
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    save_model(out_dir, model)
    save_config(config, out_dir / "config.json")
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    files = {"generation_config.json": generation, **tokenizer_files(reader)}
    for name, content in files.items():
        (out_dir / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")


def keep_embedding_bits(bits: int) -> Callable[[str, Any], bool | dict[str, Any]]:
    """quantize_model's predicate: the embedding at max(bits, EMBEDDING_BITS), the rest at bits."""

    def predicate(path: str, module: Any) -> bool | dict[str, Any]:
        if path.endswith("embed_tokens") and bits < EMBEDDING_BITS:
            return {"group_size": QUANT_GROUP_SIZE, "bits": EMBEDDING_BITS, "mode": QUANT_MODE}
        return hasattr(module, "to_quantized")

    return predicate


def check_options(dtype: str, quantize_bits: int | None) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if quantize_bits is not None and quantize_bits not in QUANT_BITS:
        raise ValueError(f"quantize_bits must be one of {QUANT_BITS} or None, got {quantize_bits}")


def convert_gguf(
    gguf_path: Path, out_dir: Path, dtype: str = "float32", quantize_bits: int | None = None
) -> Path:
    """Convert `gguf_path` into `out_dir` atomically: temp dir, then rename.

    If `out_dir` appears meanwhile (another process won the race), ours is discarded.
    """
    check_options(dtype, quantize_bits)

    def fill(staging: Path) -> None:
        write_model_dir(read_gguf(gguf_path), staging, dtype, quantize_bits)

    return write_dir_atomically(out_dir, fill, replace=False)
