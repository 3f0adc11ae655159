#!/usr/bin/env bash
# H200 call, after scripts/h200/fused_head.sh found `fused_rows` exact: the held-out
# sweep (12 prompts, width 8, n = 3) served with the fused head (scripts/h200/fused_site
# first on PYTHONPATH), then the shipped code's sweep on the same host as its control.
# The fused sweep runs only where fused_head.sh left /root/keep/fused-exact in this hold,
# for the arm it left in /root/keep/fused-arm ("all": every multi-row product; otherwise
# the heads, fused_rows.py's default); the control runs either way.
. scripts/h200/setup.sh
BF16=$(bf16_target)
export PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8
if [ -e /root/keep/fused-exact ]; then
  ARM=$(cat /root/keep/fused-arm 2>/dev/null || echo head)
  [ "$ARM" = all ] && export FUSED_BYTES=0
  PYTHONPATH=$PWD/scripts/h200/fused_site:$PYTHONPATH NAME=h200-heldout12-w8-fused-$ARM \
    bash scripts/h200/served.sh
fi
NAME=${CONTROL:-h200-heldout12-w8-shipped-s35} bash scripts/h200/served.sh
ls $OUT
