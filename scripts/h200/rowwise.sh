#!/usr/bin/env bash
# H200 call: rowwise products against the matrix kernels. The forward's time per row
# count and its distance from one-row steps (scripts/h200/rowwise.py), then per-stage
# profiles of the default pair (bf16) with each arm at widths 2, 4, 8 (16 too while the
# default drafter had blocks of 16).
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"; } > $OUT/device.txt 2>&1
timeout ${MICRO_S:-170} python3 scripts/h200/rowwise.py ${N:-20} > $OUT/rowwise.jsonl 2> $OUT/rowwise.log
cut -c1-220 $OUT/rowwise.jsonl
P="python3 -m server.cli profile --json --draft-model drafter/default_pair --attention stable --max-tokens 128 --repeats 2"
for arm in ${ARMS:-matrix rowwise}; do
  timeout ${PROFILE_S:-150} $P --width ${WIDTHS:-2,4,8} --linear $arm \
    | sed "s/^/{\"target\": \"bf16\", \"arm\": \"$arm\", \"p\": /; s/$/}/" >> $OUT/profile.jsonl 2>> $OUT/profile.log
done
python3 scripts/h200/profile_rows.py $OUT/profile.jsonl
tail -3 $OUT/profile.log
