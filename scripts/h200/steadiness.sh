#!/usr/bin/env bash
# H200 call (issue 11, steadiness): do reserved KV buffers (drafter/attention.py:
# reserve) and the startup warm-up remove the slow rounds? Two profile processes of
# 20 prompt lengths x 512 tokens at width 8, the arms alternating: mlx-lm's growth
# without warm-up (the control, as in h200-round-steadiness-heap), then as served.
# Each process's JSON line lands in $OUT/steadiness.jsonl with `process` naming it;
# the lines printed are each arm's rounds above 2x the median, the rounds that grew
# a buffer, and its requests' first rounds against the median
# (docs/benchmark_results/cpu-first-round-ingest.md). About 65 s a process. ARMS
# (comma-separated `--kv` values and flags) sets the arms and their order, e.g.
# ARMS="reserved,grown --warm-up" for the other two cells.
# TAG, if set, is appended to each line's `process` (e.g. the MLX variables a run set).
# A slow round's tuple ends with the decoding thread's CPU ms and involuntary context
# switches in it (`draftwise profile`'s round_cpu_ms, round_preempted).
. scripts/h200/setup.sh
IFS=, read -r -a arms <<< "${ARMS:-grown,reserved --warm-up}"
for arm in "${arms[@]}"; do
  timeout 280 python3 -m server.cli profile --json --width ${WIDTH:-8} --max-tokens 512 \
    --repeats 1 --requests 20 --kv $arm 2> $OUT/steadiness-${arm%% *}.err \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.readlines()[-1]); r['process']='$arm${TAG:+ $TAG}'; print(json.dumps(r))" \
    >> $OUT/steadiness.jsonl
done
python3 - <<'PY'
import json, os, statistics
for line in open(os.environ["OUT"] + "/steadiness.jsonl"):
    r = json.loads(line)
    t, grew, keys = r["round_times_ms"], set(r["growth_rounds"]), r["round_keys"]
    med = statistics.median(t)
    cpu, pre = r.get("round_cpu_ms") or [0.0] * len(t), r.get("round_preempted") or [0] * len(t)
    slow = [(i, round(x, 1), i in grew, keys[i], cpu[i], pre[i]) for i, x in enumerate(t) if x > 2 * med]
    # a request's first round: where the cached rows do not grow by one block at most
    firsts = [0] + [i for i in range(1, len(t)) if not 0 < keys[i] - keys[i - 1] <= r["width"]]
    first = [t[i] / med for i in firsts]
    print(r["process"], "rounds", len(t), "median", round(med, 2), "warm_up_s", r["warm_up_s"],
          "unmet", r.get("warm_up_unmet"),
          "| above 2x (index, ms, grew, key rows, cpu ms, preempted):", slow,
          "| cpu ms median", statistics.median(cpu), "| rounds preempted", sum(p > 0 for p in pre),
          "| growth rounds:", len(grew),
          "| first rounds:", len(first), "median x", round(statistics.median(first), 2),
          "above 1.5x", sum(x > 1.5 for x in first))
PY
