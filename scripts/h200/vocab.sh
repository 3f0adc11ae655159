#!/usr/bin/env bash
# H200 call (issue 12): the draft head with and without the checkpoint's draft vocabulary
# (drafter/default_pair/draft_vocab.json), in process. A copy of the drafter without that
# file loads with the full-vocabulary head, as a loader of the published format would.
# Arms alternate per prompt (vocab, full; then full, vocab), `draftwise profile` at
# WIDTHS (default 8) on a code header, a question and a chat turn: draft ms and acceptance.
cp .payload*/* /root/keep/ 2>/dev/null
. scripts/h200/setup.sh
FULL=/root/full-vocab && rm -rf $FULL && mkdir -p $FULL
cp drafter/default_pair/config.json drafter/default_pair/model.safetensors $FULL/
P="python3 -m server.cli profile --json --max-tokens 128 --repeats 2 --width ${WIDTHS:-8}"
PROMPTS=("def fibonacci(n):" $'Q: Why is the sky blue?\nA:'
  $'<|im_start|>user\nExplain recursion to a beginner.<|im_end|>\n<|im_start|>assistant\n')
for i in 0 1 2; do
  heads="vocab full"; [ $((i % 2)) -eq 1 ] && heads="full vocab"
  for head in $heads; do
    drafter=drafter/default_pair; [ $head = full ] && drafter=$FULL
    timeout ${PROFILE_S:-80} $P --draft-model $drafter --prompt "${PROMPTS[$i]}" \
      | sed "s/^/{\"head\": \"$head\", \"prompt\": $i, \"p\": /; s/$/}/" \
      >> $OUT/${NAME:-vocab}.jsonl 2>> $OUT/${NAME:-vocab}.log
  done
done
python3 scripts/h200/profile_rows.py $OUT/${NAME:-vocab}.jsonl
tail -3 $OUT/${NAME:-vocab}.log
