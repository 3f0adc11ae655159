#!/usr/bin/env bash
# Device call: the shipped default pair served, one event per round, against
# its classic arm: an interleaved sweep on the evaluation prompts (PROMPTS, a bench prompts
# file; PER_KIND: only its first N prompts of each kind), n = 3. The MLX_* environment of
# the call applies to both arms (the server inherits it).
. scripts/h200/setup.sh
timeout 540 python3 -m server.cli bench --interleave --widths ${WIDTHS:-4,8} \
  -n 3 --warmup 1 --max-tokens 128 --out-dir $OUT --name ${NAME:-h200-default-pair-served-rounds} \
  --prompts-file ${PROMPTS:-server/tooling/eval_prompts.json} ${PER_KIND:+--per-kind $PER_KIND} 2>&1 | sed -n "/^## Results/,/^## By prompt/p"
