#!/usr/bin/env bash
# H200 call: the trained drafters against the bf16 default target: per-stage profiles
# (stable keys), the served default's dflash.config line, and an interleaved served sweep.
. scripts/h200/setup.sh
D=/root/keep/train
P="python3 -m server.cli profile --json --attention stable --max-tokens 128 --repeats 2 --requests 8"
for d in drafter-L3 drafter-L5; do
  timeout 100 $P --draft-model $D/$d --width 2,4,8,16 \
    | sed "s/^/{\"drafter\": \"$d\", \"p\": /; s/$/}/" >> $OUT/profile-new.jsonl 2>> $OUT/profile-new.log
done
python3 -c "
import json
for line in open('$OUT/profile-new.jsonl'):
    r = json.loads(line); p = r['p']
    print(r['drafter'], 'w', p['width'], 'round', p['round_ms'], 'verify', p['verify_ms'], 'draft', p['draft_ms'], 'step', p['step_ms'], 'acc', p['acceptance_length'], 'max', p['max_round_ms'])
"
BEST=${BEST:-drafter-L3}
timeout 90 python3 scripts/h200/serve_once.py --draft-model $D/$BEST > $OUT/serve-default.txt 2>&1
grep dflash.config $OUT/serve-default.txt | cut -c1-600
timeout 330 python3 -m server.cli bench --interleave --draft-model $D/$BEST --widths ${WIDTHS:-4,8,16} \
  -n 3 --warmup 1 --max-tokens 128 --out-dir $OUT --name h200-default-pair-trained \
  --prompt "def fibonacci(n):" --prompt "class Stack:
    def __init__(self):" --prompt "Q: Why is the sky blue?
A:" --prompt "Once upon a time, in a small village by the sea," 2>&1 | tail -25
