#!/usr/bin/env bash
# H200 call: the drafter's forward in compiled stages (scripts/h200/compiled_draft.py:
# exactness on the 12 held-out prompts, round-by-round and pass-level A/Bs). Leaves
# /root/keep/staged-exact when every check held.
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout ${AB_S:-420} python3 scripts/h200/compiled_draft.py ${N:-6} ${RUNS:-8} > $OUT/compiled-draft.txt 2> $OUT/compiled-draft.log || echo "compiled_draft.py: rc $?"
rm -f /root/keep/staged-exact
grep -q '"exact": true' $OUT/compiled-draft.txt && touch /root/keep/staged-exact
grep -v '^{"arm"' $OUT/compiled-draft.txt | cut -c1-300
python3 scripts/h200/ab_summary.py $OUT/compiled-draft.txt
tail -3 $OUT/compiled-draft.log
