#!/usr/bin/env bash
# H200 call (issue 17): batched rounds on CUDA. First in process: 8 greedy requests of the
# default pair batched against each alone (CUDA has no batch-invariant kernels, so
# differences are counted, not asserted); then the concurrency sweep (batched, serial,
# mlx_lm.server) at 1, 2, 4 and 8 clients.
. scripts/h200/setup.sh
[ -n "$SKIP_IDENTITY" ] || timeout 120 python3 scripts/h200/batch_identity.py > $OUT/batch-identity.txt 2>&1
tail -5 $OUT/batch-identity.txt
timeout 440 python3 -m server.tooling.load_sweep --clients 1,2,4,8 --duration-s ${DURATION:-20} \
  --max-tokens 16 --mlx-lm --output $OUT/h200-batching-load 2>&1 | tail -5
cp $OUT/.h200-batching-load-logs/batched.log $OUT/batched.log 2>/dev/null
grep -c batch.width $OUT/batched.log
