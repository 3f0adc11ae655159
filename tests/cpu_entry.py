"""This CPU's measured policy entry for an unquantized DFlash pair (policy/table.py).

Every test that starts a real server here expects it to resolve this entry's width
and cite its record; they read both from the table, so moving the entry on a new
record changes one place. The entry depends on the BLAS the servers bind: the one
`DRAFTWISE_BLAS=auto` chooses on this host (server/blas.py), as the tests start them."""

from __future__ import annotations

import os

from policy import TABLE, Device, find_entry
from server.blas import host_blas

_blas, _ = host_blas(os.environ)
CPU_BLAS: str = "reference" if _blas is None else _blas.kind
_entry = find_entry(TABLE, Device("cpu", blas=CPU_BLAS), None, "dflash")
assert _entry is not None and _entry.width is not None, "policy/table.py lost its CPU entry"
CPU_WIDTH: int = _entry.width
CPU_RECORD: str = _entry.record.rsplit("/", 1)[-1]  # the record's file name
