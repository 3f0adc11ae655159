#!/usr/bin/env bash
# H200 call: does the device run part of a round while the host builds the rest
# (scripts/h200/overlap.py: the verify queued in pieces, the drafts queued early)?
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout ${AB_S:-300} python3 scripts/h200/overlap.py ${RUNS:-6} > $OUT/overlap.txt 2> $OUT/overlap.log || echo "overlap.py: rc $?"
grep -v "request median" $OUT/overlap.txt | cut -c1-200
tail -3 $OUT/overlap.log
