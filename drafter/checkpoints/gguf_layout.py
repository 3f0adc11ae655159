"""llama.cpp GGUF tensor layout -> Hugging Face llama layout (numpy and gguf only).

Shared by the MLX converter (drafter/checkpoints/gguf_import.py) and the PyTorch training
script (scripts/train_drafter.py), which runs where MLX may be absent.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def hf_name(gguf_name: str) -> str:
    """Map a llama.cpp tensor name to the HF llama name mlx-lm expects."""
    stem, suffix = gguf_name.rsplit(".", 1)
    if stem in _TOP_NAMES:
        return f"{_TOP_NAMES[stem]}.{suffix}"
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{suffix}"
    raise ValueError(f"unknown GGUF tensor {gguf_name!r}")


def permute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (HF -> GGUF)."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def unpermute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `permute_qk` (GGUF -> HF).

    Per head, llama.cpp interleaves the two rotary halves ([x0, y0, x1, y1, ...]) for
    its adjacent-pair RoPE; mlx-lm's non-traditional RoPE wants them split
    ([x0, x1, ..., y0, y1, ...]).
    """
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def llama_weights(reader: GGUFReader, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Dequantize every tensor to float32 under its HF name, q/k rows un-permuted."""
    weights = {}
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        value = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
        name = hf_name(tensor.name)
        if name.endswith("self_attn.q_proj.weight"):
            value = unpermute_qk(value, config["num_attention_heads"])
        elif name.endswith("self_attn.k_proj.weight"):
            value = unpermute_qk(value, config["num_key_value_heads"])
        weights[name] = value
    return weights
