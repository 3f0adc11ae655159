"""The built-in measured table. Data only: add an entry only with a committed record.

An entry earns its place when its width beats classic decode with disjoint n = 3
ranges in one session on a real pairing (docs/policy.md). width None records that
every width lost there, so the host serves classic decode unless overridden.
A CPU entry that names a BLAS wins over one that names none (policy.find_entry).
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
    TableEntry(
        backend="cuda",
        compute_capability=(9, 0),
        quantization=None,
        drafter_kind="dflash",
        width=8,
        record="docs/benchmark_results/h200-seed1-drafter.md",
        mlx_version="0.32.4",
        remeasure_when=(
            "MLX's CUDA vector attention kernel (sdpa_vector, whose one-pass code verify "
            "rows take here in one launch, drafter/vector_rows.py: 2.22x and 2.11x on an "
            "H100, h100-vector-rows.md) or its one-row linear path changes, or the default "
            "drafter is "
            "retrained (seed-1 drafter: 8 beat classic with disjoint ranges in 1 of 3 "
            "sweeps, 16 in 1 of 2, 8 with the better median in both that ran them side by "
            "side; the block-8 drafter, whose widest block is 8: 1.70x on 12 held-out "
            "prompts, disjoint, h200-heldout12-w8-blk8.md, and in a later sweep 1.51x "
            "against 4's 1.43x, both disjoint, h200-heldout12-w4-w8-blk8.md; its successor, "
            "the self-prose drafter: 8 at 1.64x, disjoint, h200-heldout12-w8-selfprose.md, "
            "and in a later sweep 8 at 1.58x, disjoint, against 4's 1.26x, overlapping "
            "classic, h200-heldout12-w4-w8-selfprose.md; run 6: 8 at 1.79x, disjoint, "
            "h200-heldout12-w8-r6-cold.md)"
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
            "MLX's CUDA quantized matmul changes where verify rows leave the one-row kernel "
            "(today width 4 is byte-identical to classic and width 8 differs by rounding), "
            "its vector attention kernel changes, or the default drafter is retrained "
            "(block-8 drafter, 12 held-out prompts: 4 beat classic by 1.55x and 1.69x in "
            "two sweeps, its range above 3's (1.41x); 8 ran at 1.74x, overlapping 4, with "
            "text that differs by rounding; 2 and 5-7 were not measured. Run 6, "
            "h200-q4g32-heldout12-w4-w8-r6.md: 4 at 1.60x, 8 at 1.96x with its range above "
            "4's, differing by rounding on 5 of 12 prompts: a second such sweep would move "
            "it to 8)"
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
            "MKL's few-row sgemm changes (today 3 and 4 rows cost 1.07-1.08x one row under "
            "MKL_CBWR=AUTO,STRICT, cpu-blas-mkl.md), the weight dtype changes, or the "
            "default drafter is retrained (float32 target on an Intel Xeon, the block-8 "
            "drafter: on 24 held-out prompts 4 beat classic by 1.66x and 3 by 1.54x, 4's "
            "range above 3's; on the 22 short prompts 4 by 1.50x and 8 by 1.34x, "
            "cpu-short22-blk8-vs-seed1.md; with the seed-1 drafter 4 led 3 on both the 22 "
            "short and the 7 evaluation prompts; the self-prose drafter, 22 short prompts: 4 by "
            "1.60x and 8 by 1.47x, 4's range above 8's, cpu-short22-selfprose-vs-shipped.md; "
            "on an AMD EPYC, where auto now takes MKL too, 4 at 1.45x and 1.38x and 3 at "
            "1.58x and 1.39x on the 24 held-out prompts, all disjoint above classic, 3 and 4 "
            "overlapping, cpu-blas-amd.md; run 6 there, cpu-amd-heldout24-w3-w4-r6.md: 4 at "
            "1.49x and 3 at 1.46x, both disjoint above classic, overlapping each other; on "
            "the 22 short prompts, cpu-amd-short22-w3-w4-r6.md, 3 at 1.32x, disjoint, and 4 "
            "at 1.18x, overlapping classic, 3 and 4 overlapping: on AMD neither width is "
            "separable; the soup drafter of session 32 on an Intel Xeon, 22 short prompts, "
            "cpu-intel-short22-w3-w4-w8-soup.md: 4 at 1.78x, its range above 3's (1.61x) and "
            "overlapping 8's (1.75x); 24 held-out prompts, cpu-intel-heldout24-w3-w4-soup.md: "
            "4 at 1.75x, its range above 3's (1.62x))"
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
            "the served BLAS or weight dtype changes (measured: float32 target with OpenBLAS "
            "on an AMD CPU, and on an Intel CPU, where 3 beat classic by 1.30x and 4 by 1.37x "
            "on the 7-prompt set, cpu-default-pair-openblas-intel.md; MKL has its own entry; "
            "with MLX's bundled reference BLAS or bfloat16 weights every width loses, see "
            "cpu-smollm2-135m-float32-reference-blas.md and cpu-smollm2-135m-bfloat16.md), "
            "MLX's CPU matmul path for a few rows changes, or the default drafter is "
            "retrained (on the 7-prompt set widths 3 to 8 all beat classic, 5 by the best "
            "median; on the 22 short prompts only 3 did, at 1.10x, while 4 and 5 broke even; "
            "with the block-8 drafter on an Intel CPU, 22 short prompts: 3 at 1.21x and 4 "
            "at 1.22x, both disjoint above classic, cpu-short22-openblas-blk8.md; with the "
            "self-prose drafter 3 at 1.29x and 4 at 1.28x, overlapping, "
            "cpu-short22-openblas-selfprose.md; the AMD host was not re-measured)"
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
            "MLX's CPU quantized matmul stops costing time linear in rows (today about "
            "3.7 ms per row for 4-bit), or a drafter accepts far more per round"
        ),
    ),
)
