"""The built-in measured table. Data only: add an entry only with a committed record.

An entry earns its place when its width beats classic decode with disjoint n = 3
ranges in one session on a real pairing (docs/policy.md). width None records that
every width lost there, so the host serves classic decode unless overridden.
A CPU entry that names a BLAS wins over one that names none (policy.find_entry).
Each entry's measurements are in its record and in
docs/benchmark_results/policy-table-notes.md; `remeasure_when` is one line.
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
            "MLX's CUDA quantized matmul moves its row-count boundaries (5-7 rows pay for an "
            "8-row accumulator; qmm from 8 rows)"
        ),
    ),
    TableEntry(
        backend="cuda",
        compute_capability=(9, 0),
        quantization=None,
        drafter_kind="dflash",
        width=8,
        record="docs/benchmark_results/h200-seed1-drafter.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "MLX's CUDA vector attention or one-row linear kernels change, or the default drafter "
            "is retrained"
        ),
    ),
    TableEntry(
        backend="cuda",
        compute_capability=(9, 0),
        quantization="affine",
        drafter_kind="dflash",
        width=4,
        record="docs/benchmark_results/h200-q4g32-heldout12-w3-w4-blk8.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "MLX's CUDA quantized matmul changes where verify rows leave the one-row kernel, or "
            "the default drafter is retrained"
        ),
    ),
    TableEntry(
        backend="cpu",
        compute_capability=None,
        quantization=None,
        drafter_kind="dflash",
        blas="mkl",
        width=4,
        record="docs/benchmark_results/cpu-heldout24-w3-w4-blk8.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "MKL's few-row sgemm changes, the weight dtype changes, or the default drafter is "
            "retrained"
        ),
    ),
    TableEntry(
        backend="cpu",
        compute_capability=None,
        quantization=None,
        drafter_kind="dflash",
        width=3,
        record="docs/benchmark_results/cpu-short-prompts.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "the served BLAS or weight dtype changes, MLX's few-row CPU matmul changes, or the "
            "default drafter is retrained"
        ),
    ),
    TableEntry(
        backend="cpu",
        compute_capability=None,
        quantization="affine",
        drafter_kind="dflash",
        width=None,
        record="docs/benchmark_results/cpu-smollm2-135m-4bit-affine.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "MLX's CPU quantized matmul stops costing time linear in rows, or a drafter accepts "
            "far more per round"
        ),
    ),
)
