"""Serve with the verify's attention in chunks of at most 3 rows (the code before
drafter/vector_rows.py), without a line of it in the serving path: the control arm
of scripts/h200/rows_served.sh. Python imports `sitecustomize` once at startup,
before any draftwise module runs, in every process started with this folder first
on PYTHONPATH, `draftwise serve` included."""

import sys

from drafter import vector_rows

vector_rows.available = lambda: False  # attention.causal_block asks it per call
print("sitecustomize: verify attention in chunks", file=sys.stderr)
