"""Undo the rejected rows of a verify forward in the target's cache.

A round verifies B rows in one target forward, then keeps only the first
n_keep of them. The cache must afterwards be exactly the cache that feeding
only those n_keep rows (in one call) would have left, so every later logit is
unchanged. Per mlx-lm cache type:

- KVCache, QuantizedKVCache: trimming the offset is exact (entries past the
  offset are never read and get overwritten by the next update).
- RotatingKVCache: `trim` is not exact once the verify update went through
  the concatenating path (it re-orders and drops old entries, and a later
  in-place update would trim the buffer front and keep the rejected rows).
  So `checkpoint` keeps the pre-verify buffers (views, no copy) and rollback
  restores them and re-feeds the kept rows' keys/values through the cache's
  own `update_and_fetch`: the same code path as the reference, wrapped or not.
- ArraysCache (Gated DeltaNet conv + recurrent state): cannot be trimmed.
  `checkpoint` keeps the state arrays and arms the cache (its `armed` recording), so
  the layer's `linear_attn` module, which drafter/forward.py gives a recording
  class, records its inputs and mask during the verify call; rollback
  restores the state and re-runs mlx-lm's own module on the first n_keep
  recorded rows (output discarded), so the numerics are mlx-lm's.

mx.array values are immutable except through `__setitem__`, which mutates
the Python object in place (KVCache and in-place RotatingKVCache updates do
this); snapshots therefore hold views (`a[...]`), which keep the old data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, KVCache, QuantizedKVCache, RotatingKVCache


@dataclass
class Recording:
    """Inputs of one hooked linear-attention call (filled during verify)."""

    module: nn.Module | None = None
    inputs: mx.array | None = None
    mask: mx.array | None = None


@dataclass
class TrimmableSnapshot:
    offset: int


@dataclass
class RotatingSnapshot:
    keys: mx.array | None
    values: mx.array | None
    offset: int
    idx: int


@dataclass
class ArraysSnapshot:
    state: list[mx.array | None]
    left_padding: mx.array | None
    lengths: mx.array | None
    recording: Recording = field(default_factory=Recording)


Snapshot = TrimmableSnapshot | RotatingSnapshot | ArraysSnapshot


@dataclass
class Checkpoint:
    snapshots: list[Snapshot]


def checkpoint(cache: list[Any]) -> Checkpoint:
    """Snapshot what rollback needs; call right before the verify forward."""
    return Checkpoint([snapshot(entry) for entry in cache])


def snapshot(entry: Any) -> Snapshot:
    if isinstance(entry, KVCache | QuantizedKVCache):
        return TrimmableSnapshot(entry.offset)
    if isinstance(entry, RotatingKVCache):
        return RotatingSnapshot(view(entry.keys), view(entry.values), entry.offset, entry._idx)
    if isinstance(entry, ArraysCache):
        state = [view(array) for array in entry.cache]
        snap = ArraysSnapshot(state, view(entry.left_padding), view(entry.lengths))
        entry.armed = snap.recording  # armed: its layer records what it is fed
        return snap
    raise TypeError(f"speculative rollback does not support {type(entry).__name__} caches")


def record_inputs(entry: ArraysCache) -> Recording:
    """Arm a batch's stacked ArraysCache (drafter/batch.py) so its hooked module records
    what it is fed; the batch then re-runs each request's accepted rows from it."""
    recording = Recording()
    entry.armed = recording
    return recording


def disarm(entry: ArraysCache) -> None:
    entry.armed = None


def view(array: mx.array | None) -> mx.array | None:
    """A new array object over the same data, unaffected by later in-place
    updates of `array` (`a[i] = x`, `a -= n` rebind the object itself)."""
    return None if array is None else array[...]


def rollback(cache: list[Any], ckpt: Checkpoint, n_keep: int, n_verified: int) -> None:
    """Keep only the first n_keep of the n_verified rows fed since `ckpt`."""
    if not 0 <= n_keep <= n_verified:
        raise ValueError(f"n_keep={n_keep} must be within 0..n_verified={n_verified}")
    if len(cache) != len(ckpt.snapshots):
        raise ValueError("checkpoint was taken from a different cache")
    for entry, snap in zip(cache, ckpt.snapshots, strict=True):
        if isinstance(snap, TrimmableSnapshot):
            rollback_trimmable(entry, snap, n_keep, n_verified)
        elif isinstance(snap, RotatingSnapshot):
            rollback_rotating(entry, snap, n_keep, n_verified)
        else:
            rollback_arrays(entry, snap, n_keep, n_verified)


def check_fed(name: str, before: int, after: int, n_verified: int) -> None:
    if after - before != n_verified:
        raise ValueError(f"{name} advanced by {after - before} rows, expected {n_verified}")


def rollback_trimmable(entry: Any, snap: TrimmableSnapshot, n_keep: int, n_verified: int) -> None:
    check_fed(type(entry).__name__, snap.offset, entry.offset, n_verified)
    entry.trim(n_verified - n_keep)


def rollback_rotating(
    entry: RotatingKVCache, snap: RotatingSnapshot, n_keep: int, n_verified: int
) -> None:
    check_fed("RotatingKVCache", snap.offset, entry.offset, n_verified)
    if n_keep == n_verified:
        return
    kept = None
    if n_keep > 0:
        # n_keep > 0 here implies n_verified > 1: the update took the
        # concatenating path, which appends the new rows at the buffer's end.
        start = entry.keys.shape[2] - n_verified
        kept = (
            entry.keys[..., start : start + n_keep, :],
            entry.values[..., start : start + n_keep, :],
        )
    entry.keys, entry.values, entry.offset, entry._idx = (
        snap.keys,
        snap.values,
        snap.offset,
        snap.idx,
    )
    if kept is not None:
        entry.update_and_fetch(*kept)


def rollback_arrays(entry: ArraysCache, snap: ArraysSnapshot, n_keep: int, n_verified: int) -> None:
    disarm(entry)
    recording = snap.recording
    if n_keep == n_verified:
        return
    if recording.inputs is None:
        raise ValueError(
            "an ArraysCache layer recorded no inputs during verify: only targets whose "
            "recurrent layers are `linear_attn` modules run through drafter.forward can roll back"
        )
    rows = recording.inputs.shape[1]
    if rows != n_verified:
        raise ValueError(f"linear_attn saw {rows} rows during verify, expected {n_verified}")
    entry.cache = list(snap.state)
    entry.left_padding, entry.lengths = snap.left_padding, snap.lengths
    if n_keep > 0:
        assert recording.module is not None  # record_inputs saw the verify forward
        mask = recording.mask
        if mask is not None:
            mask = mask[..., :n_keep]
        recording.module(recording.inputs[:, :n_keep], mask, entry)
