#!/usr/bin/env bash
# H200 call: the chosen trained drafter (BEST, default drafter-L5) against the bf16
# default target: the served default's dflash.config line, then an interleaved served
# sweep on the evaluation prompts (server/tooling/eval_prompts.json).
. scripts/h200/setup.sh
D=/root/keep/train
BEST=${BEST:-drafter-L5}
timeout 90 python3 scripts/h200/serve_once.py --draft-model $D/$BEST > $OUT/serve-default.txt 2>&1
grep dflash.config $OUT/serve-default.txt | cut -c1-700
timeout 450 python3 -m server.cli bench --interleave --draft-model $D/$BEST --widths ${WIDTHS:-4,8} \
  -n 3 --warmup 1 --max-tokens 128 --out-dir $OUT --name ${NAME:-h200-default-pair-trained} \
  --prompts-file server/tooling/eval_prompts.json 2>&1 | tail -25
