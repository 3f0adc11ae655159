#!/usr/bin/env bash
# H200 call: wait for the background training to finish, then bring back its drafters
# (weights as <= 15 MB safetensors parts; configs, vocabularies and logs in meta.tgz).
for _ in $(seq 1 110); do grep -q '"done"' /root/keep/train/train_log.json 2>/dev/null && break; sleep 5; done
cd /root/keep/train || exit 1
tar -czf $OUT/meta.tgz train_log.json stdout.txt drafter-*/config.json drafter-*/draft_vocab.json
for d in drafter-L3 drafter-L5; do
  mkdir -p $OUT/$d && cp $d/*.safetensors $OUT/$d/
done
ls -la $OUT $OUT/*; grep -v '"acceptance"' stdout.txt | tail -4
