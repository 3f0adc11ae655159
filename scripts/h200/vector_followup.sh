#!/usr/bin/env bash
# H200 call (issue 11, left from session 6): what vector attention does to the two cases
# its record did not measure. ARM=q4: the 4-bit g32 target served, interleaved (its
# three server arms start slowly: give the call its full 600 s). ARM=batch: the
# concurrency sweep (scripts/h200/batch.sh) with vector attention, then again with
# MLX_CUDA_USE_CUDNN_SDPA=1 (cuDNN kept, stable keys), to see whether batching lost.
. scripts/h200/setup.sh
if [ "${ARM:-q4}" = q4 ]; then
  Q4=$(python3 -c "from drafter.checkpoints.smollm2 import ensure_smollm2
print(ensure_smollm2(None, 'bfloat16', quantize_bits=4))" 2>/dev/null | tail -1)
  timeout 560 python3 -m server.cli bench --interleave --model "$Q4" --draft-model drafter/default_pair \
    --widths ${WIDTHS:-4,8} -n 3 --warmup 1 --max-tokens 128 --out-dir $OUT --name ${NAME:-h200-q4g32-vector} \
    --prompts-file ${PROMPTS:-server/tooling/eval_prompts.json} 2>&1 | sed -n "/^## Results/,/^## By prompt/p"
else
  for cudnn in 0 1; do
    MLX_CUDA_USE_CUDNN_SDPA=$cudnn timeout 270 python3 -m server.tooling.load_sweep --clients 1,4,8 \
      --duration-s ${DURATION:-15} --max-tokens 16 --output $OUT/h200-batching-cudnn$cudnn 2>&1 | tail -4
  done
fi
