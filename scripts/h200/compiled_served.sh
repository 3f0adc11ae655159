#!/usr/bin/env bash
# H200 call: the served A/B that session 36 could not run: the compiled activation (the
# CUDA default for speculation since then, docs/benchmark_results/h100-compiled-ffn.md)
# against mlx on one host, two interleaved sweeps back to back (mlx first, then the
# default), the 12 held-out prompts, width 8, 128 tokens, n = 3: about 230 s each.
# NAME_PREFIX names the records (h100 or h200, by the card that came).
. scripts/h200/setup.sh
BF16=$(bf16_target)
export PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8
DRAFTWISE_ACTIVATION=mlx NAME=${NAME_PREFIX:-h100}-heldout12-w8-ab-mlx bash scripts/h200/served.sh
NAME=${NAME_PREFIX:-h100}-heldout12-w8-ab-compiled bash scripts/h200/served.sh
ls $OUT
