#!/usr/bin/env bash
# H200 call: compiled feed-forward blocks in the verify (scripts/h200/compiled_ffn.py:
# exactness on the 12 held-out prompts, a verify's build and evaluation times, the
# in-process A/B, n = 10). Leaves /root/keep/compiled-exact when every check held and
# /root/keep/compiled-arm naming the arm with the lower median round, for the served
# sweep of the next call (DRAFTWISE_ACTIVATION=compiled, if that arm is "compiled").
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())" >> $OUT/device.txt 2>&1
timeout ${AB_S:-400} python3 scripts/h200/compiled_ffn.py ${N:-10} 128 > $OUT/compiled-ffn.jsonl 2> $OUT/compiled-ffn.log || echo "compiled_ffn.py: rc $?"
rm -f /root/keep/compiled-exact
grep -q '"exact": true' $OUT/compiled-ffn.jsonl && touch /root/keep/compiled-exact
grep -v '^{"arm"' $OUT/compiled-ffn.jsonl | cut -c1-300
python3 scripts/h200/ab_summary.py $OUT/compiled-ffn.jsonl
python3 scripts/h200/ab_summary.py $OUT/compiled-ffn.jsonl --lower-of compiled before > /root/keep/compiled-arm
echo "lower median round: $(cat /root/keep/compiled-arm)"
tail -3 $OUT/compiled-ffn.log
