#!/usr/bin/env bash
# H200 call: the held-out sweep (12 prompts, width 8, n = 3) served with the verify's
# attention in chunks (scripts/h200/chunks_site first on PYTHONPATH, whose
# usercustomize.py turns drafter/vector_rows.py off: the code before it), then with the
# shipped one-launch attention, on one host.
. scripts/h200/setup.sh
BF16=$(bf16_target)
bench() {
  timeout 270 python3 -m server.cli bench --interleave --widths 8 -n 3 --warmup 1 \
    --max-tokens 128 --out-dir $OUT --name $1 --prompts-file server/tooling/heldout_prompts.json \
    --per-kind 4 2>&1 | sed -n "/^## Results/,/^Control/p"
}
PYTHONPATH=$PWD/scripts/h200/chunks_site:$PYTHONPATH bench ${NAME:-h100-heldout12-w8-s38}-chunks
bench ${NAME:-h100-heldout12-w8-s38}-rows2
