"""Serve with the fused head kernel, without a line of it in the serving path.

Put this folder first on PYTHONPATH (scripts/h200/fused_served.sh does) and every
Python process started with it, `draftwise serve` included, multiplies the LM heads'
verify rows with scripts/h200/fused_rows.py's `fused_rows` (CUDA only; elsewhere
nothing changes). Python imports `sitecustomize` once at startup, before any
draftwise module runs."""

import sys
from pathlib import Path

import mlx.core as mx

if mx.cuda.is_available():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from fused_rows import fused_project, use

    use(fused_project)
    print("sitecustomize: LM head verify rows by fused_rows", file=sys.stderr)
