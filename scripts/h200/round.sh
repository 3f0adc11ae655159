#!/usr/bin/env bash
# H200 call: round cost before (exact-length keys) and after (stable keys), bf16 default
# pair and the 4-bit g32 target, per-stage profiles at widths 2, 4, 8 (16 too while the
# default drafter had blocks of 16).
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import mlx.core as mx; print(mx.__version__, mx.default_device(), mx.device_info())"; } > $OUT/device.txt 2>&1
python3 - > $OUT/targets.txt 2>&1 <<'PY'
from mlx_lm import load
from drafter.checkpoints.smollm2 import ensure_smollm2, sanity_check
print("BF16", ensure_smollm2(None, "bfloat16"))
q4 = ensure_smollm2(None, "bfloat16", quantize_bits=4)
print("Q4", q4)
print("q4 sanity:", repr(sanity_check(*load(str(q4)))))
PY
Q4=$(grep ^Q4 $OUT/targets.txt | cut -d" " -f2)
P="python3 -m server.cli profile --json --draft-model drafter/default_pair"
for arm in "bf16:" "q4:--model $Q4"; do
  name=${arm%%:*}; model=${arm#*:}
  timeout 170 $P $model --width 2,4,8 --attention exact --max-tokens 32 --repeats 1 \
    | sed "s/^/{\"target\": \"$name\", \"arm\": \"before\", \"p\": /; s/$/}/" >> $OUT/profile.jsonl 2>> $OUT/profile.log
  timeout 200 $P $model --width 2,4,8 --attention stable --max-tokens 128 --repeats 2 --requests 20 \
    | sed "s/^/{\"target\": \"$name\", \"arm\": \"after\", \"p\": /; s/$/}/" >> $OUT/profile.jsonl 2>> $OUT/profile.log
done
timeout 90 $P --width 4 --attention stable --max-tokens 512 --repeats 1 \
  | sed "s/^/{\"target\": \"bf16\", \"arm\": \"after-512\", \"p\": /; s/$/}/" >> $OUT/profile.jsonl 2>> $OUT/profile.log
python3 scripts/h200/profile_rows.py $OUT/profile.jsonl
tail -3 $OUT/profile.log
