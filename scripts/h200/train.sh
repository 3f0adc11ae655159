#!/usr/bin/env bash
# H200 call (the one that carries the last payload part): build the bf16 target dir,
# start drafter training in the background (its own session, so it outlives this call
# while the machine stays held), then follow its log until this call's time is nearly up.
# LAYERS (default "5"), INIT (a drafter dir to start from; default the shipped one, ""
# for a fresh start), SEED (which training windows and sampled user turns; the held-out
# split is by path hash and does not move), LR, DATA_S, BUDGET_S, SELF_CHAT, DISTILL (the
# weight of the loss against the target's distribution) and EARLY_BOOST (extra anchors on
# a continuation's first tokens) tune the run; TRAIN_ARGS goes to train_drafter.py as is
# (e.g. "--block-size 8").
# DATA_S counts generation only (target-written prompts, then raw windows in what is
# left); encoding the window prompts comes before it (the log's "encoded" event).
# A run that ends within this call comes back whole: its drafters' weights, configs,
# vocabularies and log land in $OUT (one depth: 8 files, the most a call brings back;
# parts of 15.5 MiB keep even a 6-layer drafter with 8 taps, 47.8 MB, to 3 of them).
# That needs BUDGET_S (the script's whole run, its evaluation included) plus about 30 s
# (payload, target dir) under WAIT_S, and WAIT_S under the call's 600 s. Prefer it to a
# run spanning calls: if the hold lapses between calls, the run is lost with the machine
# (scripts/h200/follow.sh, the second call of such a
# run, stops at once on a fresh machine).
# BRING names the depths that come back (e.g. "6"; default all of LAYERS): with two
# depths trained side by side, bring one, or fetch the other in a second call.
# RUN names the run's folder under /root/keep (default "train"; it holds the run's data,
# which a later run in the same folder would reuse). To chain runs within one hold, give
# each its own RUN and start the next from the last: RUN=run2 INIT=/root/keep/run1/drafter-L5.
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
BF16=$(bf16_target)
D=/root/keep/${RUN:-train}
INIT=${INIT-drafter/default_pair}
: ${LR:=5e-4} ${SELF_CHAT:=28000} ${DATA_S:=380} ${BUDGET_S:=1100}
start_training $D ${SEED:-0} --split-mib 15.5
# Follow the run for what is left of WAIT_S (counted from this call's start).
WAIT_S=$(( ${WAIT_S:-560} - SECONDS )) bash scripts/h200/follow.sh
