#!/usr/bin/env bash
# H200 call: an LM head's verify rows in one pass (scripts/h200/fused_head.py: exactness,
# the products alone, the in-process A/B, n = 10). The kernel (scripts/h200/fused_rows.py)
# is not in the serving path; scripts/h200/fused_served.sh serves with it in the next call
# of the hold, if this one found it exact (it leaves /root/keep/fused-exact), for the
# products of the in-process arm ("head" or "all") with the lower median round (it leaves
# that arm's name in /root/keep/fused-arm).
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())" >> $OUT/device.txt 2>&1
timeout ${AB_S:-260} python3 scripts/h200/fused_head.py ${N:-10} 128 > $OUT/fused-head.jsonl 2> $OUT/fused-head.log
rm -f /root/keep/fused-exact
grep -q '"exact": true' $OUT/fused-head.jsonl && touch /root/keep/fused-exact
grep -v '"equal_batched": true, "equal_one_row": true' $OUT/fused-head.jsonl | grep -v '"arm"' | cut -c1-300
python3 scripts/h200/ab_summary.py $OUT/fused-head.jsonl
python3 scripts/h200/ab_summary.py $OUT/fused-head.jsonl --lower-of all head > /root/keep/fused-arm
echo "served next with the arm: $(cat /root/keep/fused-arm)"
tail -3 $OUT/fused-head.log
ls $OUT
