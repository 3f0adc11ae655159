#!/usr/bin/env bash
# H200 call (issue 12): two fine-tunes of one drafter side by side, each on its own seed
# (SEEDS, default "9 10"), in parallel on the one GPU, both as train.sh's single run would
# be (the same variables: INIT, LR, DATA_S, BUDGET_S, SELF_CHAT, DISTILL, EARLY_BOOST,
# TRAIN_ARGS). Siblings from one parent are what a weight average ("model soup",
# scripts/soup.py) is made of. Both drafters and their logs come back as one tar in
# parts of 15 MiB ($OUT/siblings.tar.part.*; join with cat, then tar -x), because two
# drafters' files are more than the 8 a call brings back.
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
BF16=$(bf16_target)
INIT=${INIT-drafter/default_pair}
LAYERS=5  # the drafter-L5 dirs brought back below
: ${LR:=1.5e-4} ${SELF_CHAT:=8000} ${DATA_S:=100} ${BUDGET_S:=545}
runs=()
for seed in ${SEEDS:-9 10}; do
  runs+=(seed$seed)
  start_training /root/keep/seed$seed $seed
done
done_all() {
  for r in "${runs[@]}"; do grep -q '"event": "done"\|Traceback' /root/keep/$r/stdout.txt || return 1; done
}
while [ $SECONDS -lt ${WAIT_S:-585} ]; do sleep 5; done_all && break; done
files=()
for r in "${runs[@]}"; do
  grep -q '"event": "done"' /root/keep/$r/stdout.txt && files+=($r/drafter-L5 $r/train_log.json)
  grep -v Warning /root/keep/$r/stdout.txt | grep -v '"acceptance"' | cut -c1-300 | tail -8
  grep '"acceptance"' /root/keep/$r/stdout.txt | grep '"width": 8' | cut -c1-300
done
[ ${#files[@]} -gt 0 ] && tar -C /root/keep -cf - "${files[@]}" | split -b 15M -d - $OUT/siblings.tar.part.
ls -la $OUT
