#!/usr/bin/env bash
# H200 call: the held-out sweep (12 prompts, width 8, n = 3) served with the verify's
# attention in chunks (scripts/h200/chunks_site first on PYTHONPATH, whose
# usercustomize.py turns drafter/vector_rows.py off: the code before it), then with the
# shipped one-launch attention, on one host.
. scripts/h200/setup.sh
BF16=$(bf16_target)
export PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8
PYTHONPATH=$PWD/scripts/h200/chunks_site:$PYTHONPATH NAME=${NAME:-h100-heldout12-w8-s38}-chunks \
  bash scripts/h200/served.sh
NAME=${NAME:-h100-heldout12-w8-s38}-rows2 bash scripts/h200/served.sh
