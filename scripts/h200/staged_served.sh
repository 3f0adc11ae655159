#!/usr/bin/env bash
# H200 call: the served A/B of the drafter's compiled stages (drafter/compiled_draft.py),
# two interleaved sweeps back to back on one host: the shipped default first (the goal
# figure of issue 11), then the drafter as written (scripts/h200/plain_draft_site first on
# PYTHONPATH), the 12 held-out prompts, width 8, 128 tokens, n = 3: about 230 s each.
# NAME_PREFIX names the records (h100 or h200, by the card that came).
. scripts/h200/setup.sh
BF16=$(bf16_target)
export PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8
NAME=${NAME_PREFIX:-h100}-heldout12-w8-staged bash scripts/h200/served.sh
PYTHONPATH=$PWD/scripts/h200/plain_draft_site:$PYTHONPATH \
  NAME=${NAME_PREFIX:-h100}-heldout12-w8-plain-draft bash scripts/h200/served.sh
ls $OUT
