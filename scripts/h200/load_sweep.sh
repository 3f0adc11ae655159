#!/usr/bin/env bash
# Device call: the load sweep (server/tooling/load_sweep.py) on the default pair, every
# arm up at once, the record written to $OUT after each run (a call cut by its time
# limit keeps what it measured). ARMS: `;`-separated `NAME[@TREE]=FLAGS` (default: the
# speculative server and `--draft-model none`); a TREE (another commit's `git archive`
# of drafter/ policy/ server/, carried) gets this checkout's default drafter weights
# where it has none. CLIENTS (8,32), PASSES (3), DURATION_S (20), WARM_S (5), MAX_TOKENS
# (128), PROMPTS (a prompts file; default the load test's own), SERVE_ARGS (to every
# arm), MLX_LM (1: add the mlx_lm.server arm), CHAT (1: chat completions), SWEEP_T
# (seconds, 560).
. scripts/h200/setup.sh
bf16_target > /dev/null  # converted once, before several servers want it
IFS=';' read -ra arms <<< "${ARMS:-spec=;classic=--draft-model none}"
args=()
for arm in "${arms[@]}"; do
  args+=(--arm "$arm")
  head=${arm%%=*}
  if [[ $head == *@* ]]; then
    weights=${head#*@}/drafter/default_pair/model.safetensors
    [ -e "$weights" ] || ln -s "$PWD/drafter/default_pair/model.safetensors" "$weights"
  fi
done
for flag in ${SERVE_ARGS:-}; do args+=("--server-arg=$flag"); done
[ "${MLX_LM:-}" = 1 ] && args+=(--mlx-lm)
[ "${CHAT:-}" = 1 ] && args+=(--chat)
timeout -s INT ${SWEEP_T:-560} python3 -m server.tooling.load_sweep "${args[@]}" \
  --clients ${CLIENTS:-8,32} --passes ${PASSES:-3} --duration-s ${DURATION_S:-20} \
  --warm-s ${WARM_S:-5} --max-tokens ${MAX_TOKENS:-128} \
  ${PROMPTS:+--prompts-file $PROMPTS} --output $OUT/${NAME:-load-sweep} 2>&1 | grep -v Warning | tail -30
for log in $OUT/.${NAME:-load-sweep}-logs/*.log; do
  grep -E "dflash.config|batch.width|Traceback|Error" "$log" | tail -60 > "$OUT/$(basename "$log" .log).tail"
done
rm -rf $OUT/.${NAME:-load-sweep}-logs
