#!/usr/bin/env bash
# H200 call: the verify's attention in one launch against the shipped chunks
# (scripts/h200/vector_rows.py: exactness on the 12 held-out prompts, then a
# round-by-round A/B of RUNS runs), then a summary of each run's median rounds.
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout ${AB_S:-400} python3 scripts/h200/vector_rows.py ${RUNS:-10} > $OUT/vector-rows.txt 2> $OUT/vector-rows.log || echo "vector_rows.py: rc $?"
grep -v "request median" $OUT/vector-rows.txt | cut -c1-200
tail -3 $OUT/vector-rows.log
