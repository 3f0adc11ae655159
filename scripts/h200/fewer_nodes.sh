#!/usr/bin/env bash
# H200 call: the fewer-nodes A/B in process (scripts/h200/fewer_nodes.py, n = 10), then
# the served sweep of the 12 held-out prompts at width 8 (n = 3) on the same host.
# Write the "before" arm's modules here first (untracked, carried with the tree):
#   mkdir -p before && for m in rowwise attention; do
#     git show bc2bdd0:drafter/$m.py > before/${m}_bc2bdd0.py; done
for m in rowwise attention; do
  [ -f before/${m}_bc2bdd0.py ] || { echo "before/${m}_bc2bdd0.py missing (see the header)"; exit 2; }
done
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())" >> $OUT/device.txt 2>&1
timeout 220 python3 scripts/h200/fewer_nodes.py ${N:-10} 128 > $OUT/fewer-nodes.jsonl 2> $OUT/fewer-nodes.log
python3 scripts/h200/ab_summary.py $OUT/fewer-nodes.jsonl
PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 WIDTHS=8 NAME=${NAME:-h200-heldout12-w8-fewer-nodes} \
  timeout 330 bash scripts/h200/served.sh
ls $OUT
