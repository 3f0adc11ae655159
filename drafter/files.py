"""Model directories on disk: one atomic directory write, one config reader.

A model directory is written whole or not at all: it is built in a staging folder
beside its destination and moved there in one rename, so a reader (another
server sharing the cache, a crash mid-write) never sees half a model.
Multimodal checkpoints nest the language model's fields under `text_config`;
`config_value` looks at the top level first, then there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

# A Hugging Face model id (org/name), as `--model` and `--draft-model` may name one.
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


ModelReference = Literal["dir", "id"]


def model_reference(value: str) -> ModelReference | None:
    """What a model setting names: a model directory (it holds config.json), a Hugging
    Face model id (org/name, and no path here), or neither (None)."""
    path = Path(value).expanduser()
    if (path / "config.json").is_file():
        return "dir"
    if not path.exists() and REPO_ID.match(value):
        return "id"
    return None


def write_dir_atomically(path: Path, fill: Callable[[Path], None], replace: bool = True) -> Path:
    """Build `path` by calling `fill(staging_dir)`, then move it into place.

    replace=True: an existing `path` is replaced. replace=False: if `path` appeared
    meanwhile (another process won the race), it is kept and ours discarded. The
    result is world-readable (mkdtemp makes 0700; the cache may be shared)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        fill(staging)
        staging.chmod(0o755)
        if replace and path.exists():
            shutil.rmtree(path)
        try:
            os.rename(staging, path)
        except OSError:
            if replace or not (path / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def read_config(model_dir: Path | str) -> dict[str, Any]:
    """The model's config.json."""
    return json.loads((Path(model_dir) / "config.json").read_text())


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's own fields: `text_config` when nested there, else the top."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) and nested else config


def config_value(config: Mapping[str, Any], *keys: str) -> Any:
    """The first of `keys` set (not None) at the top level, else under text_config."""
    for source in (config, config.get("text_config") or {}):
        for key in keys:
            if source.get(key) is not None:
                return source[key]
    return None
