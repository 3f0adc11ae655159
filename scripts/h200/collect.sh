#!/usr/bin/env bash
# H200 call: wait for the background training to finish, bring back its drafters
# (weights as <= 15 MB safetensors parts; configs, vocabularies and logs in meta.tgz),
# then profile both depths against the bf16 target in MLX (stable keys, warm-up on).
. scripts/h200/setup.sh
D=/root/keep/train
while [ $SECONDS -lt 330 ]; do grep -q '"done"\|Traceback' $D/stdout.txt 2>/dev/null && break; sleep 5; done
tar -C $D -czf $OUT/meta.tgz train_log.json stdout.txt drafter-L3/config.json drafter-L5/config.json \
  drafter-L3/draft_vocab.json drafter-L5/draft_vocab.json
for d in drafter-L3 drafter-L5; do mkdir -p $OUT/$d && cp $D/$d/*.safetensors $OUT/$d/; done
grep '"acceptance"' $D/stdout.txt | grep '"width": 8' | cut -c1-300
grep -v '"acceptance"\|Warning' $D/stdout.txt | tail -6 | cut -c1-300
P="python3 -m server.cli profile --json --attention stable --max-tokens 128 --repeats 2 --requests 8"
left=$((560 - SECONDS))
for d in drafter-L3 drafter-L5; do
  timeout $((left / 2 > 20 ? left / 2 : 20)) $P --draft-model $D/$d --width 4,8,16 \
    | sed "s/^/{\"drafter\": \"$d\", \"p\": /; s/$/}/" >> /root/keep/profile.jsonl 2>> /root/keep/profile.log
done
cp /root/keep/profile.jsonl /root/keep/profile.log $OUT/ 2>/dev/null
python3 -c "
import json
for line in open('/root/keep/profile.jsonl'):
    r = json.loads(line); p = r['p']
    print(r['drafter'], 'w', p['width'], 'round', p['round_ms'], 'verify', p['verify_ms'], 'draft', p['draft_ms'], 'step', p['step_ms'], 'acc', p['acceptance_length'], 'max', p['max_round_ms'])
"
