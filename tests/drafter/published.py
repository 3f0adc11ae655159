"""The published DFlash checkpoint's weight names, written out as the specification."""

from __future__ import annotations

LAYER_NAMES = {
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
}


def published_weight_names(num_layers: int) -> set[str]:
    """Every weight a published DFlash checkpoint with `num_layers` layers holds."""
    layers = {f"layers.{i}.{name}" for i in range(num_layers) for name in LAYER_NAMES}
    return {"fc.weight", "hidden_norm.weight", "norm.weight"} | layers
