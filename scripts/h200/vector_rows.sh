#!/usr/bin/env bash
# H200 call: the verify's attention in one launch (drafter/vector_rows.py) against the
# chunks it replaced (scripts/h200/vector_rows.py: every row of random blocks against
# MLX's one-row call, greedy exactness on the 12 held-out prompts and 4 long ones, then
# round-by-round A/Bs: RUNS runs on a short prompt, RUNS / 2 past 1,024 keys); prints
# all but the per-request lines.
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout ${AB_S:-400} python3 scripts/h200/vector_rows.py ${RUNS:-10} > $OUT/vector-rows.txt 2> $OUT/vector-rows.log || echo "vector_rows.py: rc $?"
grep -v "request median" $OUT/vector-rows.txt | cut -c1-200
tail -3 $OUT/vector-rows.log
