#!/usr/bin/env bash
# H200 run A: device probe, the dflash.config line for quantized targets,
# and the verify-cost curves (issue 3 and issue 6, record 3).
. scripts/h200/setup.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"; } > $OUT/device.txt 2>&1
python3 - > $OUT/quantized-targets.txt 2>&1 <<'PY'
from drafter.smollm2 import ensure_smollm2
print("PATH", ensure_smollm2(None, "bfloat16", quantize_bits=4))
PY
Q4=$(grep ^PATH $OUT/quantized-targets.txt | cut -d" " -f2)
{ echo "== default pair, no override"; python3 scripts/h200/serve_once.py --exactness warn
  echo "== 4-bit affine SmolLM2 + trained drafter"; python3 scripts/h200/serve_once.py --model "$Q4" --draft-model drafter/default_pair --exactness warn
  echo "== 4-bit affine, DRAFTWISE_DRAFT_BLOCK_SIZE=4"; DRAFTWISE_DRAFT_BLOCK_SIZE=4 python3 scripts/h200/serve_once.py --model "$Q4" --draft-model drafter/default_pair --exactness warn
} > $OUT/dflash-config-lines.txt 2>&1
timeout 400 python3 -m drafter.verify_cost --arch qwen3-4b --arch qwen3.5-4b --quant affine --quant nvfp4 \
  --warmup 2 --repeats 10 --out $OUT/verify_cost.json 2> $OUT/verify_cost.log
echo done
