"""The one-launch verify attention (drafter/vector_rows.py): which blocks it takes,
which rows take which of MLX's kernels, the scale it is compiled with, and the chunks
that serve wherever it cannot run.
Its rows' bit-equality with MLX's vector kernel needs a CUDA device: the startup
probe checks it in each process, scripts/h200/vector_rows.py per row
(docs/benchmark_results/h100-vector-rows.md)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from drafter import vector_rows
from drafter.attention import causal_block, chunked_attention
from drafter.vector_rows import VECTOR_TWO_PASS_KEYS, fits, one_pass_rows


def block(rows: int, keys: int, D: int = 64, dtype: mx.Dtype = mx.bfloat16) -> list[mx.array]:
    shapes = [(1, 9, rows, D), (1, 3, keys, D), (1, 3, keys, D)]
    return [mx.random.normal(s, key=mx.random.key(i)).astype(dtype) for i, s in enumerate(shapes)]


def test_verify_blocks_of_the_head_sizes_and_dtypes_mlx_builds_fit() -> None:
    assert fits(*block(8, 100))
    assert fits(*block(16, 40, D=128, dtype=mx.float16))
    assert fits(*block(8, 3000, D=96, dtype=mx.float32))


@pytest.mark.parametrize(
    ("rows", "keys", "below"),
    [
        (8, 100, 8),
        (8, VECTOR_TWO_PASS_KEYS, 8),
        (8, VECTOR_TWO_PASS_KEYS + 1, 7),
        (8, VECTOR_TWO_PASS_KEYS + 4, 4),
        (8, VECTOR_TWO_PASS_KEYS + 8, 0),
        (3, 5000, 0),
    ],
)
def test_rows_that_read_at_most_the_one_pass_keys_come_first(
    rows: int, keys: int, below: int
) -> None:
    """Row i of a causal block reads keys - rows + i + 1 keys: the rows a one-row step
    would compute with MLX's one-pass kernel are the block's first `below`."""
    assert one_pass_rows(rows, keys) == below
    counts = [keys - rows + i + 1 for i in range(rows)]
    assert sum(c <= VECTOR_TWO_PASS_KEYS for c in counts) == below


@pytest.mark.parametrize("D", [32, 80, 256])
def test_head_sizes_mlx_has_no_vector_kernel_for_do_not_fit(D: int) -> None:
    assert not fits(*block(8, 100, D=D))


def test_mixed_dtypes_do_not_fit() -> None:
    q, k, v = block(8, 100)
    assert not fits(q.astype(mx.float32), k, v)


@pytest.mark.parametrize("scale", [64**-0.5, 96**-0.5, 0.1, 1.0])
def test_the_scale_literal_is_the_float32_mlx_passes(scale: float) -> None:
    literal = vector_rows.scale_literal(scale)
    assert literal.endswith("f")
    assert float.fromhex(literal[:-1]) == float(np.float32(scale))


def test_without_a_cuda_device_a_causal_block_is_chunked() -> None:
    assert not vector_rows.available()
    q, k, v = block(8, 50, dtype=mx.float32)
    assert mx.array_equal(causal_block(q, k, v, 0.125), chunked_attention(q, k, v, 0.125)).item()
