"""Serve with the verify's attention in chunks of at most 3 rows (the code before
drafter/vector_rows.py), without a line of it in the serving path: the control arm
of scripts/h200/rows_served.sh. Python imports `usercustomize` once at startup,
before any draftwise module runs, in every process started with this folder first
on PYTHONPATH, `draftwise serve` included (`usercustomize`, not `sitecustomize`:
scripts/h200/fused_site has that name, and one name twice is one module to mypy)."""

import sys

from drafter import vector_rows

# attention.causal_block asks it per call (a cached function: hence the ignore)
vector_rows.available = lambda: False  # type: ignore[assignment]
print("usercustomize: verify attention in chunks", file=sys.stderr)
