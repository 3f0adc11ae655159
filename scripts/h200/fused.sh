#!/usr/bin/env bash
# H200 call (issue 11): sibling products fused (drafter/fused.py). First the in-process
# A/B (scripts/h200/fused_ab.py: N passes, arms alternating), then the 12 held-out prompts
# (the first 4 of each kind) served at WIDTHS against classic, interleaved, n = 3, both
# arms fused (the CUDA default now). Rows: $OUT/fused-ab.jsonl; the sweep: $OUT/$NAME.*.
. scripts/h200/setup.sh
BF16=$(bf16_target)
python3 - <<'PY'
import json
data = json.load(open("server/tooling/heldout_prompts.json"))
keep = [i for i, k in enumerate(data["kinds"]) if data["kinds"][:i].count(k) < 4]
out = {"kinds": [data["kinds"][i] for i in keep], "prompts": [data["prompts"][i] for i in keep]}
json.dump(out, open("/root/heldout12.json", "w"))
PY
timeout ${AB_S:-220} python3 scripts/h200/fused_ab.py ${N:-10} 128 > $OUT/fused-ab.jsonl 2> $OUT/fused-ab.err
python3 - <<'PY'
import json, os, statistics
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/fused-ab.jsonl")]
for arm in ("unfused", "fused"):
    r = [x for x in rows if x["arm"] == arm]
    for key in ("round_ms", "draft_ms", "verify_ms", "step_ms"):
        v = [x[key] for x in r]
        print(arm, key, round(statistics.median(v), 2), round(min(v), 2), round(max(v), 2), "n", len(v))
    print(arm, "acceptance", r[0]["acceptance_length"] if r else None)
passes = {}
for x in rows:
    passes.setdefault(x["pass"], {})[x["arm"]] = x
for key in ("round_ms", "step_ms", "draft_ms", "verify_ms"):
    wins = sum(p["fused"][key] < p["unfused"][key] for p in passes.values() if len(p) == 2)
    print("fused cheaper", key, wins, "of", len(passes))
PY
timeout ${SWEEP_S:-330} python3 -m server.cli bench --interleave --widths ${WIDTHS:-8} -n 3 \
  --warmup 1 --max-tokens 128 --out-dir $OUT --name ${NAME:-h200-heldout12-w8-fused} \
  --prompts-file /root/heldout12.json 2>&1 | sed -n "/^## Results/,/^## By kind/p"
