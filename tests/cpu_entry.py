"""This CPU's measured policy entry for an unquantized DFlash pair (policy/table.py).

Every test that starts a real server here expects it to resolve this entry's width
and cite its record; they read both from the table, so moving the entry on a new
record changes one place."""

from __future__ import annotations

from policy import TABLE, Device, find_entry

_entry = find_entry(TABLE, Device("cpu"), None, "dflash")
assert _entry is not None and _entry.width is not None, "policy/table.py lost its CPU entry"
CPU_WIDTH: int = _entry.width
CPU_RECORD: str = _entry.record.rsplit("/", 1)[-1]  # the record's file name
