#!/usr/bin/env bash
# H200 call: the LM heads' verify rows in one pass (scripts/h200/fused_head.py: exactness,
# the product alone, the in-process A/B, n = 10), then the served sweep of the 12 held-out
# prompts at width 8 (n = 3) on the same host.
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())" >> $OUT/device.txt 2>&1
timeout ${AB_S:-260} python3 scripts/h200/fused_head.py ${N:-10} 128 > $OUT/fused-head.jsonl 2> $OUT/fused-head.log
grep -v '"equal_batched": true, "equal_one_row": true' $OUT/fused-head.jsonl | grep -v '"arm"' | cut -c1-300
python3 scripts/h200/ab_summary.py $OUT/fused-head.jsonl
tail -3 $OUT/fused-head.log
if grep -q '"exact": true' $OUT/fused-head.jsonl && [ -z "$NO_SWEEP" ]; then
  PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8 NAME=${NAME:-h200-heldout12-w8-fused-head} \
    timeout 300 bash scripts/h200/served.sh
fi
ls $OUT
