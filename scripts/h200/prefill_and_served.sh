#!/usr/bin/env bash
# H200 call (issue 11): what a served prefill costs (scripts/h200/prefill_cost.py, with and
# without cuBLASLt's heuristics cache), then the 12 held-out prompts served at width 8.
. scripts/h200/setup.sh
export BF16=$(bf16_target)
lscpu | grep "Model name" > $OUT/host.txt; nproc >> $OUT/host.txt
timeout 240 python3 scripts/h200/prefill_cost.py > $OUT/prefill-cost.jsonl 2> $OUT/prefill-cost.err
CUBLASLT_HEURISTICS_CACHE_CAPACITY=0 timeout 200 python3 scripts/h200/prefill_cost.py > $OUT/prefill-cost-nocache.jsonl 2>> $OUT/prefill-cost.err
tail -3 $OUT/prefill-cost.err
python3 - <<'P'
import json,os,statistics as s
for f in ("prefill-cost.jsonl","prefill-cost-nocache.jsonl"):
    rows=[json.loads(l) for l in open(os.environ["OUT"]+"/"+f) if l.startswith("{")]
    print(f, [r for r in rows if r["arm"]=="classic step"])
    for arm in ("forward","speculative","classic"):
        for p in (0,1,2):
            ms=[r["ms"] for r in rows if r["arm"]==arm and r.get("pass")==p]
            if ms: print(arm,p,"median %.2f range %.2f-%.2f n=%d"%(s.median(ms),min(ms),max(ms),len(ms)))
P
WIDTHS=8 PROMPTS=server/tooling/heldout_prompts.json PER_KIND=4 NAME=${NAME:-h200-heldout12-w8} bash scripts/h200/served.sh
