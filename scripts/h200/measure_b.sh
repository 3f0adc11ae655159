#!/usr/bin/env bash
# H200 run B: the default pair served through the sweep harness, every width.
. scripts/h200/setup.sh
timeout 560 python3 -c "import sys; from server.cli import main; sys.exit(main())" bench \
  --widths 2,3,4,5,6,7,8,16 -n 3 --warmup 1 --max-tokens 128 --exactness warn \
  --out-dir $OUT --name h200-smollm2-default-pair 2>&1 | tail -60
