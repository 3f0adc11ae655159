#!/usr/bin/env bash
# Follow a drafter training run in /root/keep/$RUN (default "train") until it ends or
# WAIT_S seconds (default 560) pass, then bring its drafters (the depths in BRING, default
# all of LAYERS, default 5), its log and the tail of its output back through $OUT.
# train.sh ends with it. Alone, it is the second call of a run that outlives its first
# call: `RUN=r9 WAIT_S=560 bash scripts/h200/follow.sh`. It stops at once, exit status 3,
# where the run's folder is missing: the call found a fresh machine (the hold lapsed
# between calls, and the run went with the old one), so waiting would only spend device
# time.
D=/root/keep/${RUN:-train}
if [ ! -f $D/stdout.txt ]; then
  echo "follow.sh: no run in $D: this is a fresh machine, the run was lost with the last hold" >&2
  exit 3
fi
start=$SECONDS
while [ $((SECONDS - start)) -lt ${WAIT_S:-560} ]; do
  grep -q '"event": "done"\|Traceback' $D/stdout.txt && break
  sleep 5
done
if grep -q '"event": "done"' $D/stdout.txt; then
  for d in $(cd $D && ls -d drafter-L*); do
    case " ${BRING:-${LAYERS:-5}} " in
      *" ${d#drafter-L} "*) mkdir -p $OUT/$d && cp $D/$d/* $OUT/$d/ ;;
    esac
  done
  cp $D/train_log.json $OUT/
fi
grep -v Warning $D/stdout.txt | cut -c1-600 | tail -40
