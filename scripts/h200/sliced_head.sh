#!/usr/bin/env bash
# H200 call: the head read in vocabulary slices (scripts/h200/sliced_head.py: the product
# alone, then the in-process A/B, n = 10), then MLX's CUDA graph size (ops a graph,
# MLX_MAX_OPS_PER_BUFFER) as process arms of `draftwise profile` (scripts/h200/graphs.sh,
# OPS_ARMS, PASSES passes): a round ends by waiting for its last graph, so a smaller
# graph leaves less of the round exposed, at more launches.
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 -c "import mlx.core as mx; print(mx.__version__, mx.device_info())" >> $OUT/device.txt 2>&1
timeout ${AB_S:-240} python3 scripts/h200/sliced_head.py ${N:-10} 128 > $OUT/sliced-head.jsonl 2> $OUT/sliced-head.log
head -3 $OUT/sliced-head.jsonl
python3 - $OUT/sliced-head.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"arm"')]
for key in ("round_ms", "draft_ms", "verify_ms", "step_ms"):
    by = {a: [r[key] for r in rows if r["arm"] == a] for a in ("before", "after")}
    wins = sum(a < b for a, b in zip(by["after"], by["before"]))
    print(key, {a: (round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3)) for a, v in by.items() if v}, f"after cheaper in {wins} of {len(by['after'])}")
PY
tail -2 $OUT/sliced-head.log
[ -n "${OPS_ARMS}" ] && ARMS="$OPS_ARMS" NAME=graph-size PASSES=${PASSES:-2} bash scripts/h200/graphs.sh
ls $OUT
