"""The local policy file: entries `draftwise calibrate` measured on this host.

`draftwise serve` reads it at startup (`load_calibration`) and passes the entries
to `resolve_width(calibration=...)`; `draftwise calibrate` (server/tooling/)
writes it. Both ends live here so the serving path imports no tooling.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from policy import PolicyError, TableEntry, entries_from_json, entries_to_json
from server.settings import default_cache_dir

CALIBRATION_FILE = "calibration.json"


def default_calibration_path(cache_dir: Path | None = None) -> Path:
    """Where `draftwise calibrate` writes and `draftwise serve` reads: <cache dir>/policy/."""
    return Path(cache_dir or default_cache_dir()) / "policy" / CALIBRATION_FILE


def load_calibration(path: Path) -> tuple[TableEntry, ...]:
    """The entries of the policy file at `path`; none when it does not exist.

    A malformed file raises PolicyError naming the file, which stops startup.
    """
    path = Path(path)
    if not path.is_file():
        return ()
    try:
        return entries_from_json(path.read_text())
    except PolicyError as error:
        raise PolicyError(f"calibration file {path}: {error}") from error


def write_calibration(path: Path, entries: Sequence[TableEntry]) -> None:
    """Write atomically (temp file, then rename) so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(entries_to_json(entries))
    os.replace(tmp, path)
