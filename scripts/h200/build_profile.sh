#!/usr/bin/env bash
# H200 call: where a round's host time goes (scripts/h200/build_profile.py: per-op build
# costs, each stage's build and evaluation, cProfile of 60 rounds), then the shipped
# default served on the 12 held-out prompts (width 8, 128 tokens, n = 3, about 230 s):
# a reading of issue 11's goal figure. NAME_PREFIX names the sweep (h100 or h200).
. scripts/h200/setup.sh
BF16=$(bf16_target)
timeout 200 python3 scripts/h200/build_profile.py > $OUT/build-profile.txt 2>&1 || echo "build_profile.py: rc $?"
grep -v "^ *[0-9].*{" $OUT/build-profile.txt | head -40
PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8 \
  NAME=${NAME_PREFIX:-h100}-heldout12-w8-s37 bash scripts/h200/served.sh
ls $OUT
