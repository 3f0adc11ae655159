"""The built-in measured table. Data only: add an entry only with a committed record.

An entry earns its place when its width beats classic decode with disjoint n = 3
ranges in one session on a real pairing (docs/policy.md). width None records that
every width lost there, so the host serves classic decode unless overridden.
"""

from __future__ import annotations

from policy.entries import TableEntry

TABLE: tuple[TableEntry, ...] = (
    TableEntry(
        backend="cuda",
        compute_capability=(12, 1),
        quantization="affine",
        drafter_kind="dflash",
        width=4,
        record="docs/benchmark_results/gb10-qwen3.5-4b-4bit-dflash-published.md",
        mlx_version="81ba1c6a",
        remeasure_when=(
            "MLX changes its CUDA quantized matmul row-count boundaries: a new multi-row "
            "qmv instantiation (today 5 to 7 rows pay for the 8-row accumulator), a wider "
            "fp_qmv path, or a move of the qmv-to-qmm switch at 8 rows"
        ),
    ),
)
