#!/usr/bin/env bash
# H200 call: start drafter training in the background (its own session, so it outlives
# this call while the machine stays held), then the exactness record while it runs.
. scripts/h200/setup.sh
BF16=$(ls -d /root/cache/smollm2-*-bfloat16 | head -1)
mkdir -p /root/keep/train
setsid nohup python3 scripts/train_drafter.py --gguf $GGUF --target-dir $BF16 \
  --out /root/keep/train --site --layers 3 5 --gen-batch 1024 --data-seconds 270 \
  --budget-seconds 690 --eval-seconds 80 --split-mib 15 > /root/keep/train/stdout.txt 2>&1 < /dev/null &
sleep 2
timeout 500 python3 scripts/h200/exactness.py --out $OUT/exactness.json > $OUT/exactness.txt 2>&1
tail -5 $OUT/exactness.txt
grep -v '"acceptance"' /root/keep/train/stdout.txt | tail -5
