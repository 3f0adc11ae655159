#!/usr/bin/env bash
# H200 call: op chains at 1-16 rows with cuDNN attention on and off (scripts/h200/ops.py),
# the 4-bit target's forward per arm, and the bf16 forward with cuDNN attention off.
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
timeout 100 python3 scripts/h200/ops.py 20 > $OUT/ops.jsonl 2> $OUT/ops.log
MLX_CUDA_USE_CUDNN_SDPA=0 timeout 100 python3 scripts/h200/ops.py 20 nocudnn >> $OUT/ops.jsonl 2>> $OUT/ops.log
python3 -c "
import json
rows = [json.loads(l) for l in open('$OUT/ops.jsonl')]
for r in rows: print(r['sdpa'], r['op'], r['rows'], r['median_ms'], r['min_ms'], r['max_ms'])
"
tail -3 $OUT/ops.log
timeout 150 python3 scripts/h200/rowwise.py 20 q4g32 > $OUT/rowwise-q4.jsonl 2> $OUT/rowwise.log
MLX_CUDA_USE_CUDNN_SDPA=0 timeout 150 python3 scripts/h200/rowwise.py 20 bf16 > $OUT/rowwise-nocudnn.jsonl 2>> $OUT/rowwise.log
cut -c1-200 $OUT/rowwise-q4.jsonl $OUT/rowwise-nocudnn.jsonl
tail -3 $OUT/rowwise.log
