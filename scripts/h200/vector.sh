#!/usr/bin/env bash
# H200 call: vector attention + rowwise products (the new CUDA default) against cuDNN
# with stable keys and matrix products (the previous default): per-stage profiles of
# the default pair (bf16), then the served default's dflash.config line (its probe).
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
P="python3 -m server.cli profile --json --draft-model drafter/default_pair --max-tokens 128 --repeats 2"
MLX_CUDA_USE_CUDNN_SDPA=1 timeout 120 $P --width ${OLD_WIDTHS:-4,8} --attention stable --linear matrix \
  | sed 's/^/{"target": "bf16", "arm": "cudnn-stable-matrix", "p": /; s/$/}/' >> $OUT/profile.jsonl 2>> $OUT/profile.log
timeout 200 $P --width ${NEW_WIDTHS:-2,4,8} --requests ${REQUESTS:-8} \
  | sed 's/^/{"target": "bf16", "arm": "vector-rowwise", "p": /; s/$/}/' >> $OUT/profile.jsonl 2>> $OUT/profile.log
python3 scripts/h200/profile_rows.py $OUT/profile.jsonl
tail -2 $OUT/profile.log
timeout 120 python3 scripts/h200/serve_once.py > $OUT/serve-default.txt 2>&1
grep dflash.config $OUT/serve-default.txt | cut -c1-900
