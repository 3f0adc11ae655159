"""Tiny deterministic random models, written to disk in mlx-lm's format.

Tests (and the server, before a real pair exists) need real checkpoints that
go through mlx-lm's real loader. These are built from mlx-lm's own model
classes with seeded random weights and a byte-level tokenizer (256 byte
tokens plus `<|endoftext|>`), so they are identical on every machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.utils import _get_classes

from drafter.files import write_dir_atomically

EOS = "<|endoftext|>"
VOCAB = 257  # 256 byte tokens + EOS

# Dimensions both tiny targets share.
_TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}

QWEN3: dict[str, Any] = {
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    **_TINY,
    "rope_theta": 10000.0,
}

QWEN3_5: dict[str, Any] = {
    "model_type": "qwen3_5",
    "architectures": ["Qwen3_5ForCausalLM"],
    **_TINY,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 2,
    "rope_parameters": {"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
}

ARCHITECTURES = {"qwen3": QWEN3, "qwen3_5": QWEN3_5}


# ChatML with Hermes-style tools, as Qwen3's template writes them (shortened).
CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
You may call these functions:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{{ message.content }}
{%- for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def byte_level_tokenizer_files(chat_template: str | None = CHAT_TEMPLATE) -> dict[str, Any]:
    """tokenizer.json / tokenizer_config.json for a byte-level BPE without merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte-level symbols
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    vocab[EOS] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([EOS])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS,
        "bos_token": None,
        "pad_token": EOS,
        "model_max_length": 2048,
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    return {"tokenizer.json": json.loads(tokenizer.to_str()), "tokenizer_config.json": config}


def build_model(config: dict[str, Any], seed: int) -> Any:
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    mx.eval(model.parameters())
    return model


def write_tiny_model(
    path: Path,
    arch: str = "qwen3",
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    chat_template: str | None = CHAT_TEMPLATE,
) -> Path:
    """Write a tiny random `arch` model with its tokenizer (and, unless None, a chat
    template) to `path` (atomically)."""
    config = {**ARCHITECTURES[arch], **(overrides or {}), "eos_token_id": VOCAB - 1}
    model = build_model(config, seed)
    files = {"config.json": config, **byte_level_tokenizer_files(chat_template)}

    def fill(staging: Path) -> None:
        weights = dict(tree_flatten(model.parameters()))
        mx.save_safetensors(str(staging / "model.safetensors"), weights)
        for name, content in files.items():
            (staging / name).write_text(json.dumps(content, indent=2))

    return write_dir_atomically(Path(path), fill)


def ensure_tiny_model(cache_dir: Path, arch: str = "qwen3", seed: int = 0) -> Path:
    """The cached tiny model for (arch, seed), generated on first use and reused after."""
    path = Path(cache_dir) / f"tiny-{arch}-seed{seed}"
    if not (path / "model.safetensors").exists():
        write_tiny_model(path, arch, seed)
    return path
