#!/usr/bin/env bash
# H200 call (issue 11): does MLX's CUDA graph batching set the cost of a round?
# MLX records up to MLX_MAX_OPS_PER_BUFFER ops (100 on sm_90) into one CUDA graph,
# then updates or re-instantiates a cached executable graph and launches it
# (mlx/backend/cuda/device.cpp, CommandEncoder::commit); MLX_USE_CUDA_GRAPHS=0
# launches each kernel directly. The 135M target's forward is launch-bound, so each
# arm profiles the bf16 default pair in process (`draftwise profile`), arms
# interleaved over PASSES passes (ABCD, DCBA, ...). A served sweep under an arm's
# environment is scripts/h200/served.sh with that variable set.
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())"; } > $OUT/device.txt 2>&1
read -r -a ARMS <<< "${ARMS:-default: nographs:MLX_USE_CUDA_GRAPHS=0 ops1000:MLX_MAX_OPS_PER_BUFFER=1000 ops20:MLX_MAX_OPS_PER_BUFFER=20}"
P="python3 -m server.cli profile --json --draft-model drafter/default_pair --max-tokens 128 --repeats 2 --width ${WIDTHS:-8}"
for pass in $(seq ${PASSES:-2}); do
  order=($(seq 0 $((${#ARMS[@]} - 1)))); [ $((pass % 2)) -eq 0 ] && order=($(seq $((${#ARMS[@]} - 1)) -1 0))
  for i in "${order[@]}"; do
    arm=${ARMS[$i]}; name=${arm%%:*}; envs=${arm#*:}
    env $envs timeout ${PROFILE_S:-65} $P | sed "s/^/{\"arm\": \"$name\", \"pass\": $pass, \"p\": /; s/$/}/" \
      >> $OUT/${NAME:-graphs}.jsonl 2>> $OUT/${NAME:-graphs}.log
  done
done
python3 scripts/h200/profile_rows.py $OUT/${NAME:-graphs}.jsonl
tail -3 $OUT/${NAME:-graphs}.log
