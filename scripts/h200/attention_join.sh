#!/usr/bin/env bash
# H200 call: the verify's attention chunks joined along the row axis against the shipped
# join (scripts/h200/attention_join.py: exactness on the 12 held-out prompts, then a
# round-by-round A/B of RUNS runs), then a summary of each run's median rounds.
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout ${AB_S:-400} python3 scripts/h200/attention_join.py ${RUNS:-10} > $OUT/attention-join.txt 2> $OUT/attention-join.log || echo "attention_join.py: rc $?"
grep -v "request median" $OUT/attention-join.txt | cut -c1-200
tail -3 $OUT/attention-join.log
