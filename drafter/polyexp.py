"""Attention on the CPU with an exp built from vector arithmetic.

MLX's CPU `exp` runs one element at a time, and its attention fallback (`mx.fast.
scaled_dot_product_attention` off the GPU: two matmuls around a softmax) spends
most of its time there, in verify blocks and prefills alike
(docs/benchmark_results/cpu-amd-polyexp.md).

`exp` here is Cephes' single-precision expf written in MLX ops, which MLX's
compiler fuses into one loop the C++ compiler vectorises:

    exp(x) = 2^n * exp(f),  n = round(x / ln 2),  f = x - n ln 2 in [-ln2/2, ln2/2]

with n ln 2 subtracted in two parts (Cody-Waite: ln 2 = LN2_HI + LN2_LO, LN2_HI
short enough that n * LN2_HI is exact), exp(f) a degree-7 polynomial in Horner
form, and 2^n written straight into a float's exponent bits. Its error against
float64 is under 1e-7 relative over [-87, 0] (MLX's own CPU exp: 3.9e-6).

`attention` is MLX's fallback with that softmax: the same matmuls and masks, so
only the exponentials round differently. It serves multi-row queries of 8k scores and
more (verify and drafter blocks past ~230 keys, prefills past ~30 tokens); a one-row
query, a classic decode step, keeps MLX's attention (see `attention`). Past ~1M
scores its temporaries are megabytes, which glibc by default unmaps on free and faults
in again at the next call: on the 2-core AMD host the loop then fell to 50-130 M
elements/s and a 400-700-token prefill ran 10-30% slower than MLX's, so until session
39 such queries went to MLX. With freed memory kept (drafter/loading.py:
keep_freed_memory, which a serving process sets wherever polyexp serves) they run
faster than MLX's: the 24 held-out prompts' prefills 12% less (sum of medians), a
1,000-token one 23% (docs/benchmark_results/cpu-amd-prefill-polyexp.md). So a verify row and
the classic step at its position may differ in the last bits of their exps, as
they already may in their products (MKL on an AMD CPU); the startup exactness probe
measures the difference and decides whether speculation serves (docs/exactness.md).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

LOG2E = 1.4426950408889634
LN2_HI = 0.693359375  # 0x3f318000: nine significant bits, so n * LN2_HI is exact
LN2_LO = -2.12194440e-4  # ln 2 - LN2_HI
# Scores per request below which MLX's attention stays: there the exps cost under 0.1 ms a
# call (85 M/s), and in process on the 22 short prompts (contexts under ~200 keys) polyexp
# gained nothing (width-4 requests 0.975 of exact's, faster in 9 of 22).
MIN_SCORES = 1 << 13
FLOOR = -87.0  # below this exp(x) < 1.7e-38: taken as exactly 0 (a masked key weighs nothing)
CEIL = 88.0  # above this exp(x) overflows float32
# Cephes expf: exp(f) ~ 1 + f + f^2 * P(f), P of degree 5 (coefficients high to low).
P = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)


def _mantissa_and_exponent(x: mx.array) -> tuple[mx.array, mx.array]:
    """exp(f) and the float32 bit pattern of 2^n (0 where x < FLOOR), elementwise."""
    clamped = mx.clip(x, FLOOR, CEIL)
    n = mx.floor(clamped * LOG2E + 0.5)
    f = clamped - n * LN2_HI - n * LN2_LO
    poly = P[0]
    for c in P[1:]:
        poly = poly * f + c
    mantissa = poly * f * f + f + 1.0
    bits = mx.left_shift((n + 127).astype(mx.int32), 23)
    return mantissa, mx.where(x < FLOOR, 0, bits)


# shapeless: one compiled kernel serves every shape. (A bit cast cannot be compiled,
# so the product with 2^n is one more op, below.)
_compiled = mx.compile(_mantissa_and_exponent, shapeless=True)


def exp(x: mx.array) -> mx.array:
    """exp(x) for float32 x; -inf and anything below FLOOR give exactly 0."""
    mantissa, bits = _compiled(x)
    return mantissa * bits.view(mx.float32)


# silu(gate) * x = gate * x / (1 + exp(-gate)), given exp(-gate)'s two factors
_swiglu_tail = mx.compile(
    lambda gate, x, mantissa, power: gate * x / (1.0 + mantissa * power), shapeless=True
)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """mlx-lm's `swiglu`, silu(gate) * x, with `exp` above (drafter/activation.py). Past
    |gate| = 87 exp(-gate) is clamped, where silu(gate) is gate or 0 to float32's
    precision. Elementwise: a row's output does not depend on the rows beside it."""
    mantissa, bits = _compiled(-gate)
    return _swiglu_tail(gate, x, mantissa, bits.view(mx.float32))


def softmax(scores: mx.array) -> mx.array:
    """softmax over the last axis, float32."""
    e = exp(scores - mx.max(scores, axis=-1, keepdims=True))
    return e / mx.sum(e, axis=-1, keepdims=True)


def attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any
) -> mx.array:
    """Scaled dot-product attention as `mx.fast.scaled_dot_product_attention` defines
    it (its mask: None, "causal" bottom-right, boolean keep, or additive), grouped
    query heads included, with `softmax` above.

    queries (B, H, L, D); keys, values (B, Hk, S, D) with H a multiple of Hk. The
    G = H / Hk query heads that share a key head are stacked as one (G * L)-row
    matmul, as MLX's fallback does.

    A one-row query (a classic decode step) and one of fewer than MIN_SCORES scores (a
    short context) get MLX's attention itself: a row has too few scores for the exp to
    matter (9 heads x 600 keys: 0.06 ms a layer by MLX's exp), and the softmax here is
    five operations where MLX's is one; in process, a one-row step under polyexp made
    classic decode 5% slower (the 24 held-out prompts, n = 24 pairs)."""
    B, H, L, D = queries.shape
    kv_heads, S = keys.shape[1], keys.shape[2]
    if L == 1 or H * L * S < MIN_SCORES:
        return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)
    group = H // kv_heads
    q = (queries * scale).reshape(B, kv_heads, group * L, D)
    scores = (q @ keys.swapaxes(-1, -2)).reshape(B, kv_heads, group, L, S)
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"unknown attention mask {mask!r}")
        # query i sits at key position S - L + i and sees the keys up to it
        keep = mx.arange(S - L, S)[:, None] >= mx.arange(S)[None]
        scores = mx.where(keep, scores, -mx.inf)
    elif mask is not None:
        mask = grouped(mask, kv_heads, group)
        scores = mx.where(mask, scores, -mx.inf) if mask.dtype == mx.bool_ else scores + mask
    weights = softmax(scores.astype(mx.float32)).astype(values.dtype)
    out = weights.reshape(B, kv_heads, group * L, S) @ values
    return out.reshape(B, H, L, D)


def grouped(mask: mx.array, kv_heads: int, group: int) -> mx.array:
    """A mask broadcastable to (B, H, L, S), laid out for scores (B, kv_heads, group, L, S)."""
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if mask.shape[1] == 1:
        return mask[:, :, None]
    return mask.reshape(mask.shape[0], kv_heads, group, *mask.shape[2:])
