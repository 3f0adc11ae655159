#!/usr/bin/env bash
# H200 call, after scripts/h200/fused_head.sh found `fused_rows` exact: the held-out
# sweep (12 prompts, width 8, n = 3) served with the fused head (scripts/h200/fused_site
# first on PYTHONPATH), then the shipped code's sweep on the same host as its control.
# The fused sweep runs only where fused_head.sh left /root/keep/fused-exact in this hold,
# with the FUSED_BYTES it left in /root/keep/fused-bytes (default 8 MB: the heads); the
# control runs either way.
. scripts/h200/setup.sh
BF16=$(bf16_target)
export PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8
if [ -e /root/keep/fused-exact ]; then
  export FUSED_BYTES=$(cat /root/keep/fused-bytes 2>/dev/null || echo $((8 << 20)))
  PYTHONPATH=$PWD/scripts/h200/fused_site:$PYTHONPATH NAME=h200-heldout12-w8-fused-$FUSED_BYTES \
    bash scripts/h200/served.sh
fi
NAME=${CONTROL:-h200-heldout12-w8-shipped-s35} bash scripts/h200/served.sh
ls $OUT
