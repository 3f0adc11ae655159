"""The DFlash drafter: model, checkpoint loading and saving.

A DFlash drafter is a small stack of Qwen3-style decoder layers with no
embedding and no LM head of its own. It reads the target's hidden states at
`target_layer_ids` (concatenated on the feature axis), projects them with
`fc` then `hidden_norm`, and feeds that context to every layer as extra keys
and values; queries come only from the block `[anchor, mask, ...]`. Attention
over [context; block] is not causal. Only the context K/V is cached.

The checkpoint format is the published one: `config.json` with
`architectures: ["DFlashDraftModel"]` and `dflash_config`, and a safetensors
file with the names `fc.weight`, `hidden_norm.weight`, `norm.weight`,
`layers.N.self_attn.*`, `layers.N.mlp.*`, `layers.N.*_layernorm.weight`.

Optionally `draft_vocab.json` (`{"token_ids": [...]}`) beside them: the tokens
the target emits most often. The draft head then scores only those rows of the
target's embedding (EAGLE-3's draft vocabulary, FR-Spec), a fraction of the
head's cost; tokens outside it get probability zero as drafts. Verification
still uses the full vocabulary, so exactness is untouched. A loader of the
published format ignores the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import KVCache
from mlx_lm.models.qwen3 import MLP
from mlx_lm.models.rope_utils import initialize_rope

from drafter import polyexp
from drafter.attention import (
    CACHES,
    VectorKVCache,
    folded_attention,
    right_padded,
    uses_polyexp,
)
from drafter.decoding import DraftScores
from drafter.files import read_config, text_config, write_dir_atomically
from drafter.forward import set_linear
from drafter.rowwise import project, transposed

ARCHITECTURE = "DFlashDraftModel"
DRAFT_VOCAB_FILE = "draft_vocab.json"
WEIGHTS_FILE = "model.safetensors"  # what save_drafter writes; a loader reads every *.safetensors
DEFAULT_BLOCK_SIZE = 16
REQUIRED_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "rms_norm_eps",
    "vocab_size",
)


DFLASH_KEYS = ("mask_token_id", "target_layer_ids")


class DrafterError(ValueError):
    """A drafter checkpoint that is missing, malformed, or does not fit the target."""


@dataclass
class ModelArgs:
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    vocab_size: int
    target_layer_ids: list[int]
    mask_token_id: int
    head_dim: int | None = None
    num_target_layers: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    max_position_embeddings: int = 40960
    rope_theta: float = 1000000.0
    rope_scaling: dict[str, Any] | None = None
    attention_bias: bool = False
    quantization: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelArgs:
        """Read a published DFlash `config.json` (block_size top level or in dflash_config)."""
        dflash = config["dflash_config"]
        rope = config.get("rope_scaling") or config.get("rope_parameters")
        rope_theta = config.get("rope_theta", (rope or {}).get("rope_theta", 1000000.0))
        if rope is not None and rope.get("rope_type", rope.get("type")) in (None, "default"):
            rope = None
        return cls(
            **{key: config[key] for key in REQUIRED_KEYS},
            target_layer_ids=[int(i) for i in dflash["target_layer_ids"]],
            mask_token_id=int(dflash["mask_token_id"]),
            head_dim=config.get("head_dim"),
            num_target_layers=config.get("num_target_layers"),
            block_size=int(dflash.get("block_size", config.get("block_size", DEFAULT_BLOCK_SIZE))),
            max_position_embeddings=config.get("max_position_embeddings", 40960),
            rope_theta=float(rope_theta),
            rope_scaling=rope,
            attention_bias=bool(config.get("attention_bias", False)),
            quantization=config.get("quantization"),
        )

    def to_config(self) -> dict[str, Any]:
        """The published `config.json` layout."""
        config: dict[str, Any] = {
            "architectures": [ARCHITECTURE],
            "model_type": "qwen3",
            **{key: getattr(self, key) for key in REQUIRED_KEYS},
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "attention_bias": self.attention_bias,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "tie_word_embeddings": False,
            "num_target_layers": self.num_target_layers,
            "block_size": self.block_size,
            "dflash_config": {
                "mask_token_id": self.mask_token_id,
                "target_layer_ids": list(self.target_layer_ids),
            },
        }
        if self.quantization is not None:
            config["quantization"] = self.quantization
        return config


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The published default choice of tapped layers: evenly spaced over [1, depth - 3]."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [round(start + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


class Attention(nn.Module):
    """Block queries attend, without a causal mask, to [context; block] keys.

    Batched over B requests: x holds every request's block (B, L, H); each request has
    its own new context rows and its own cache, so its RoPE positions are its own. With
    B > 1 the keys are right-padded to the longest request and masked; with B = 1 this
    is exactly the single-request computation."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        dim, head_dim = args.hidden_size, args.head_dim
        assert head_dim is not None  # ModelArgs.__post_init__ derives it when absent
        self.n_heads = args.num_attention_heads
        self.n_kv_heads = args.num_key_value_heads
        self.scale = head_dim**-0.5
        bias = args.attention_bias
        self.q_proj = nn.Linear(dim, self.n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(dim, self.n_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * head_dim, dim, bias=bias)
        self.q_norm = nn.RMSNorm(head_dim, eps=args.rms_norm_eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=args.rms_norm_eps)

    def heads(self, x: mx.array, n: int) -> mx.array:
        B, L, _ = x.shape
        return x.reshape(B, L, n, -1).transpose(0, 2, 1, 3)

    def __call__(
        self, x: mx.array, contexts: list[mx.array], rope: nn.Module, caches: list[KVCache]
    ) -> mx.array:
        B, L, _ = x.shape
        starts = [cache.offset for cache in caches]  # each request's first new context row
        block_starts = [start + c.shape[1] for start, c in zip(starts, contexts, strict=True)]
        offset = block_starts[0] if B == 1 else mx.array(block_starts)
        queries = rope(self.q_norm(self.heads(self.q_proj(x), self.n_heads)), offset=offset)
        fetched = [self.fetch(x[b : b + 1], contexts[b], rope, caches[b]) for b in range(B)]
        mask = None
        if B == 1:
            keys, values = fetched[0]
        else:
            lengths = [start + L for start in block_starts]
            width = max(lengths)
            keys = right_padded([k for k, _ in fetched], lengths, width)
            values = right_padded([v for _, v in fetched], lengths, width)
            mask = (mx.arange(width)[None] < mx.array(lengths)[:, None])[:, None, None, :]
        if mask is None and isinstance(caches[0], VectorKVCache):
            out = folded_attention(queries, keys, values, self.scale)
        elif uses_polyexp(caches[0]):
            out = polyexp.attention(queries, keys, values, self.scale, mask)
        else:
            out = mx.fast.scaled_dot_product_attention(
                queries, keys, values, scale=self.scale, mask=mask
            )
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    def fetch(
        self, x: mx.array, context: mx.array, rope: nn.Module, cache: KVCache
    ) -> tuple[mx.array, mx.array]:
        """One request: write [new context; block] into its cache, read [context; block]
        back, and trim the block off again: only the context stays cached.

        x: the request's (1, L, H) block rows. The new context rows and the block rows
        sit at consecutive positions, so one projection, norm and RoPE serve both: the
        same math as projecting them apart, with 5 fewer kernels a layer (a launch-bound
        GPU pays per kernel: docs/benchmark_results/h200-fewer-kernels.md). Where the
        joined rows pass rowwise.MAX_ROWS (wide blocks after a long accepted run) the
        product may round differently; that moves a draft at most, never a served token.
        A prompt's rows come in before the first round (`ingest`), not here."""
        L = x.shape[1]
        rows = mx.concatenate([context, x], axis=1) if context.shape[1] > 0 else x
        keys, values = self.write(rows, rope, cache)
        cache.trim(L)
        return keys, values

    def write(self, rows: mx.array, rope: nn.Module, cache: KVCache) -> tuple[mx.array, mx.array]:
        """Append the keys and values of `rows` (1, S, H), at the cache's next positions;
        returns everything the cache then holds."""
        keys = self.k_norm(self.heads(self.k_proj(rows), self.n_kv_heads))
        keys = rope(keys, offset=cache.offset)
        values = self.heads(self.v_proj(rows), self.n_kv_heads)
        return cache.update_and_fetch(keys, values)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args.hidden_size, args.intermediate_size)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)

    def __call__(
        self, x: mx.array, contexts: list[mx.array], rope: nn.Module, caches: list[KVCache]
    ) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), contexts, rope, caches)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDraftModel(nn.Module):
    """Block embeddings + target features in, normed block hidden states out."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        taps = len(args.target_layer_ids)
        self.fc = nn.Linear(taps * args.hidden_size, args.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.layers = [DecoderLayer(args) for _ in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.rope = initialize_rope(
            args.head_dim,
            base=args.rope_theta,
            traditional=False,
            scaling_config=args.rope_scaling,
            max_position_embeddings=args.max_position_embeddings,
        )

    def __call__(
        self, block: mx.array, features: list[mx.array], caches: list[list[KVCache]]
    ) -> mx.array:
        """block: (B, L, H) embeddings, one request per row; features: each request's
        (1, S_b, n_taps * H) new context rows; caches: each request's per-layer cache."""
        sizes = [f.shape[1] for f in features]
        merged = features[0] if len(features) == 1 else mx.concatenate(features, axis=1)
        context = self.context(merged)
        bounds = [sum(sizes[:b]) for b in range(1, len(sizes))]
        contexts = mx.split(context, bounds, axis=1) if bounds else [context]
        h = block
        for i, layer in enumerate(self.layers):
            h = layer(h, contexts, self.rope, [cache[i] for cache in caches])
        return self.norm(h)

    def context(self, features: mx.array) -> mx.array:
        """Tapped target features (1, S, n_taps * H) as context rows (1, S, H)."""
        if features.shape[1] == 0:  # a round after `ingest`: nothing new yet
            return mx.zeros((features.shape[0], 0, self.args.hidden_size), features.dtype)
        return self.hidden_norm(self.fc(features))

    def ingest(self, features: mx.array, caches: list[KVCache]) -> None:
        """Take `features` into the per-layer context caches now (lazy), as a round
        would before drafting: each layer's keys and values of the context rows (none
        for no rows: a round drafted by lookup right after the prompt's ingest)."""
        if features.shape[1] == 0:
            return
        context = self.context(features)
        for layer, cache in zip(self.layers, caches, strict=True):
            layer.self_attn.write(context, self.rope, cache)

    def make_cache(self, attention: str = "exact") -> list[KVCache]:
        kind = CACHES.get(attention, KVCache)
        return [kind() for _ in self.layers]


def target_embedding(target: nn.Module) -> nn.Module:
    return target.model.embed_tokens


def head_module(target: nn.Module) -> nn.Module:
    """The module holding the LM head's (V, H) weight: lm_head, or the tied embedding."""
    for owner in (target, getattr(target, "language_model", None)):
        head = getattr(owner, "lm_head", None) if owner is not None else None
        if head is not None:
            return head
    return target_embedding(target)


def target_head(target: nn.Module) -> Any:
    """The target's LM head (or its tied embeddings), as a callable on hidden states.

    A tied head's `as_linear` is looked up per call: the engine swaps the embedding's
    class (drafter/rowwise.py, drafter/columns.py) after the drafter is made, and a
    method bound here would keep the class it had then."""
    module = head_module(target)
    if module is not target_embedding(target):
        return module
    return lambda hidden: module.as_linear(hidden)


def target_dims(target: nn.Module) -> tuple[int, int, int]:
    """(hidden size, vocabulary size, depth) of an mlx-lm target."""
    embed = target_embedding(target)
    vocab = embed.weight.shape[0]
    hidden = getattr(embed, "dims", None) or embed.weight.shape[1]
    return hidden, vocab, len(target.layers)


class RestrictedHead:
    """The target's LM head restricted to the rows of `token_ids`: scores over those
    tokens only (drafter/decoding.py: DraftScores makes drafts or full-vocabulary logits
    of them; q, the draft distribution, is zero off the vocabulary)."""

    def __init__(self, module: nn.Module, token_ids: list[int], vocab: int) -> None:
        self.ids = mx.array(token_ids, dtype=mx.int32)
        self.vocab = vocab
        self.rowwise = False  # drafter/rowwise.py: batched one-row products
        self.weight = module.weight[self.ids]
        self.operands = transposed(self.weight)  # drafter/rowwise.py: kept views
        self._columns: mx.array | None = None  # see `columns`
        self.quantized = getattr(module, "scales", None) is not None
        if self.quantized:
            self.scales = module.scales[self.ids]
            biases = getattr(module, "biases", None)
            self.biases = None if biases is None else biases[self.ids]
            self.options = {
                "group_size": module.group_size,
                "bits": module.bits,
                "mode": getattr(module, "mode", "affine"),
            }

    def __call__(self, hidden: mx.array) -> mx.array:
        if self.quantized:
            scores = mx.quantized_matmul(
                hidden, self.weight, self.scales, self.biases, transpose=True, **self.options
            )
        elif self.rowwise:
            scores = project(hidden, self.weight, self.operands)
        else:
            scores = hidden @ self.columns()
        return scores

    def columns(self) -> mx.array:
        """The weight as one contiguous (H, N) matrix, made on first use. The gathered
        rows are this head's own copy anyway, and on CPU OpenBLAS multiplies 1 to 7 rows
        by an (H, N) matrix in 0.63-0.72 of the time it takes with the transpose of an
        (N, H) one (docs/benchmark_results/cpu-draft-head-layout.md), with scores equal
        bit for bit there. Another BLAS may differ in the last bits: the scores only
        choose drafts, which the target verifies, so exactness is untouched."""
        if self._columns is None:
            self._columns = mx.contiguous(self.weight.T)
        return self._columns


def read_draft_vocab(path: Path, vocab: int) -> list[int] | None:
    file = path / DRAFT_VOCAB_FILE
    if not file.is_file():
        return None
    try:
        ids = json.loads(file.read_text())["token_ids"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise DrafterError(f"drafter {file}: malformed ({error})") from error
    if not ids or not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
        raise DrafterError(f"drafter {file}: token_ids must be ids within vocabulary {vocab}")
    return ids


class DFlashDrafter:
    """A loaded DFlash model bound to its target's embeddings and LM head."""

    def __init__(
        self,
        model: DFlashDraftModel,
        args: ModelArgs,
        target: nn.Module,
        path: Path,
        draft_vocab: list[int] | None = None,
    ) -> None:
        self.model = model
        self.args = args
        self.path = path
        self.embed = target_embedding(target)
        self.draft_vocab = draft_vocab
        if draft_vocab is None:
            self.head = target_head(target)
        else:
            self.head = RestrictedHead(head_module(target), draft_vocab, args.vocab_size)

    @property
    def head_tokens(self) -> int:
        """How many tokens the draft head scores: its draft vocabulary, or all of them."""
        return self.args.vocab_size if self.draft_vocab is None else len(self.draft_vocab)

    @property
    def target_layer_ids(self) -> list[int]:
        return self.args.target_layer_ids

    @property
    def block_size(self) -> int:
        return self.args.block_size

    @property
    def mask_token_id(self) -> int:
        return self.args.mask_token_id

    @property
    def max_width(self) -> int:
        """The widest block the drafter was trained for (its checkpoint block_size)."""
        return self.args.block_size

    @property
    def prescribed_width(self) -> int | None:
        """Published checkpoints carry a training block size, not a serving width."""
        return None

    def make_cache(self, attention: str = "exact") -> list[KVCache]:
        return self.model.make_cache(attention)

    def set_linear(self, mode: str) -> None:
        """The drafter's layers in the `mode` layout (drafter/linear.py), and rowwise
        products for its restricted head when rowwise (a full head is the target's,
        which the engine swaps with the target)."""
        set_linear(self.model, mode)
        if isinstance(self.head, RestrictedHead):
            self.head.rowwise = mode == "rowwise"

    def observe(self, tokens: list[int], cache: list[KVCache]) -> None:
        """The tokens reach it as features instead (`ingest`, each round's context)."""

    def proposes(self, cache: list[KVCache]) -> bool:
        """It always drafts a block."""
        return True

    def ingest(self, features: mx.array, cache: list[KVCache]) -> None:
        """Take a prompt's features (1, S, n_taps * H) into the context now (lazy).

        The server calls it at the end of a prefill, so the prompt's context rows are
        projected there, with the prompt, and a request's first round drafts from the
        same few new rows as every later one, rather than a slow first round
        (docs/benchmark_results/cpu-first-round-ingest.md)."""
        self.model.ingest(features, cache)

    def draft_scores(
        self, anchor: int, features: mx.array, cache: list[KVCache], width: int
    ) -> DraftScores:
        """Scores (width - 1, N) for the block rows after the anchor (lazy).

        features: the target's tapped hidden states (1, S, n_taps * H) for the
        positions not yet in the drafter's context; they end right before the
        anchor's position, and are appended to the cached context.
        """
        return self.draft_scores_batch([anchor], [features], [cache], width)[0]

    def draft_scores_batch(
        self,
        anchors: list[int],
        features: list[mx.array],
        caches: list[list[KVCache]],
        width: int,
    ) -> DraftScores:
        """`draft_scores` for B requests in one forward: (B, width - 1, N), lazy."""
        mask = self.args.mask_token_id
        block = mx.array([[anchor] + [mask] * (width - 1) for anchor in anchors])
        hidden = self.model(self.embed(block), features, caches)
        scores = self.head(hidden[:, 1:])
        if isinstance(self.head, RestrictedHead):
            return DraftScores(scores, self.head.ids, self.head.vocab)
        return DraftScores(scores)


def check_fits_target(args: ModelArgs, target: nn.Module) -> None:
    hidden, vocab, depth = target_dims(target)
    if args.hidden_size != hidden:
        raise DrafterError(f"drafter hidden_size {args.hidden_size} != target hidden size {hidden}")
    if args.vocab_size != vocab:
        raise DrafterError(f"drafter vocab_size {args.vocab_size} != target vocabulary {vocab}")
    if args.num_target_layers is not None and args.num_target_layers != depth:
        raise DrafterError(
            f"drafter num_target_layers {args.num_target_layers} != target depth {depth}"
        )
    bad = [i for i in args.target_layer_ids if not 0 <= i < depth]
    if not args.target_layer_ids or bad:
        raise DrafterError(
            f"drafter target_layer_ids {args.target_layer_ids} do not fit a target of depth {depth}"
        )
    if not 0 <= args.mask_token_id < vocab:
        raise DrafterError(f"drafter mask_token_id {args.mask_token_id} outside vocabulary {vocab}")


def read_drafter_config(path: Path) -> dict[str, Any]:
    """The drafter's config.json, checked for the published DFlash layout."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise DrafterError(f"drafter {path}: missing config.json")
    try:
        config = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DrafterError(f"drafter {config_file}: malformed JSON ({error})") from error
    if not isinstance(config, dict):
        raise DrafterError(f"drafter {config_file}: expected a JSON object")
    if ARCHITECTURE not in (config.get("architectures") or []):
        raise DrafterError(
            f"drafter {config_file}: architectures {config.get('architectures')} "
            f"lack {ARCHITECTURE!r}"
        )
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        raise DrafterError(f"drafter {config_file}: missing dflash_config")
    missing = [k for k in REQUIRED_KEYS if k not in config]
    missing += [f"dflash_config.{k}" for k in DFLASH_KEYS if k not in dflash]
    if missing:
        raise DrafterError(f"drafter {config_file}: missing {', '.join(missing)}")
    return config


def read_weights(path: Path) -> dict[str, mx.array]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise DrafterError(f"drafter {path}: no *.safetensors weights")
    weights: dict[str, mx.array] = {}
    for file in files:
        try:
            weights.update(mx.load(str(file)))
        except Exception as error:  # mlx raises plain RuntimeError/ValueError on bad files
            raise DrafterError(f"drafter {file}: malformed safetensors ({error})") from error
    return weights


def quantize(model: DFlashDraftModel, quantization: dict[str, Any], weights: dict) -> None:
    """Turn the layers that the checkpoint stores quantized into quantized layers."""

    def predicate(path: str, module: nn.Module) -> bool:
        return hasattr(module, "to_quantized") and f"{path}.scales" in weights

    nn.quantize(
        model,
        group_size=quantization["group_size"],
        bits=quantization["bits"],
        mode=quantization.get("mode", "affine"),
        class_predicate=predicate,
    )


def load_drafter(path: str | Path, target: nn.Module, draft_vocab: bool = True) -> DFlashDrafter:
    """Load a published-format DFlash checkpoint and bind it to `target`; with
    `draft_vocab`, restrict the draft head to the checkpoint's draft vocabulary if any."""
    path = Path(path)
    if not path.is_dir():
        raise DrafterError(f"drafter {path}: not a directory")
    config = read_drafter_config(path)
    try:
        args = ModelArgs.from_config(config)
    except (TypeError, ValueError, KeyError) as error:
        raise DrafterError(f"drafter {path}/config.json: malformed ({error})") from error
    check_fits_target(args, target)
    weights = read_weights(path)
    model = DFlashDraftModel(args)
    if args.quantization is not None:
        quantize(model, args.quantization, weights)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as error:
        raise DrafterError(f"drafter {path}: weights do not match config ({error})") from error
    # Compute in the target's activation dtype: a bf16 checkpoint drafting for a
    # float32 target would otherwise run MLX's slow CPU bf16 kernels every round.
    model.set_dtype(target_embedding(target)(mx.array([0])).dtype)
    mx.eval(model.parameters())
    model.eval()
    vocab = read_draft_vocab(path, args.vocab_size) if draft_vocab else None
    return DFlashDrafter(model, args, target, path, vocab)


def save_drafter(path: str | Path, model: DFlashDraftModel, args: ModelArgs) -> Path:
    """Write `model` in the published format (atomically replaces `path`)."""

    def fill(staging: Path) -> None:
        weights = dict(tree_flatten(model.parameters()))
        mx.save_safetensors(str(staging / WEIGHTS_FILE), weights, metadata={"format": "mlx"})
        (staging / "config.json").write_text(json.dumps(args.to_config(), indent=2))

    return write_dir_atomically(Path(path), fill)


def write_random_drafter(
    path: str | Path,
    target_dir: str | Path,
    *,
    num_layers: int = 1,
    target_layer_ids: list[int] | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    mask_token_id: int | None = None,
    seed: int = 0,
    quantization: dict[str, Any] | None = None,
) -> Path:
    """A seeded random DFlash drafter shaped for the target in `target_dir` (for tests)."""
    target = text_config(read_config(target_dir))
    depth = target["num_hidden_layers"]
    args = ModelArgs(
        hidden_size=target["hidden_size"],
        num_hidden_layers=num_layers,
        intermediate_size=target["intermediate_size"],
        num_attention_heads=target["num_attention_heads"],
        num_key_value_heads=target["num_key_value_heads"],
        head_dim=target.get("head_dim"),
        rms_norm_eps=target["rms_norm_eps"],
        vocab_size=target["vocab_size"],
        target_layer_ids=target_layer_ids or [1, max(1, depth - 2)],
        mask_token_id=target["vocab_size"] - 1 if mask_token_id is None else mask_token_id,
        num_target_layers=depth,
        block_size=block_size,
        max_position_embeddings=target.get("max_position_embeddings", 2048),
        rope_theta=float(target.get("rope_theta", 10000.0)),
        quantization=quantization,
    )
    mx.random.seed(seed)
    model = DFlashDraftModel(args)
    if quantization is not None:
        nn.quantize(
            model,
            group_size=quantization["group_size"],
            bits=quantization["bits"],
            mode=quantization.get("mode", "affine"),
        )
    mx.eval(model.parameters())
    return save_drafter(path, model, args)
