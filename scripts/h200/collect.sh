#!/usr/bin/env bash
# H200 call: wait for the background training to finish, bring back its drafters
# (weights as <= 15 MB safetensors parts; configs, vocabularies and logs in meta.tgz),
# then profile each against the bf16 target in MLX (the backend's default attention).
. scripts/h200/setup.sh
D=/root/keep/train
while [ $SECONDS -lt ${WAIT_S:-330} ]; do grep -q '"done"\|Traceback' $D/stdout.txt 2>/dev/null && break; sleep 5; done
DRAFTERS=$(cd $D && ls -d drafter-L* 2>/dev/null)
tar -C $D -czf $OUT/meta.tgz train_log.json stdout.txt \
  $(for d in $DRAFTERS; do echo $d/config.json $d/draft_vocab.json; done)
for d in $DRAFTERS; do mkdir -p $OUT/$d && cp $D/$d/*.safetensors $OUT/$d/; done
grep '"acceptance"' $D/stdout.txt | grep '"width": 8' | cut -c1-300
grep -v '"acceptance"\|Warning' $D/stdout.txt | tail -6 | cut -c1-300
P="python3 -m server.cli profile --json --max-tokens 128 --repeats 2 --requests 8"
for d in $DRAFTERS; do
  timeout ${PROFILE_S:-120} $P --draft-model $D/$d --width ${PROFILE_WIDTHS:-4,8} \
    | sed "s/^/{\"drafter\": \"$d\", \"p\": /; s/$/}/" >> /root/keep/profile.jsonl 2>> /root/keep/profile.log
done
cp /root/keep/profile.jsonl /root/keep/profile.log $OUT/ 2>/dev/null
python3 scripts/h200/profile_rows.py /root/keep/profile.jsonl
