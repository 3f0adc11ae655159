"""What the loader resolved, in one typed shape: the `dflash.config` startup line,
`/health`'s "speculative" block and `/v1/settings` carry it, and `draftwise bench`
reads it back from `/health`. No MLX here, so the bench harness can import it."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict  # pydantic reads it (bench) on Python 3.11

# SpeculativeConfig.attention (attention.py), .linear (linear.py), .activation (activation.py)
ATTENTION_MODES = ("exact", "polyexp", "vector")
LINEAR_MODES = ("rowwise", "padded", "columns", "matrix")
ACTIVATION_MODES = ("mlx", "polyexp", "prefill")


class ProbeFields(TypedDict):
    """The startup exactness probe's verdict (drafter/probe.py)."""

    exactness: str
    divergences: int
    max_margin: float | None
    kernel_noise: float
    probe_tokens: int


class SpeculativeConfig(TypedDict):
    block_size: int | None  # the resolved width; None: classic decode
    source: str  # which rule chose it: flag, env:NAME, calibration, policy, default
    reason: str
    ignored: list[str]  # overrides that lost to a higher-priority one
    speculative: bool  # whether requests are served speculatively
    drafter: str  # its directory, or "none"
    model_path: str  # the target's directory (also its tokenizer's)
    backend: str
    compute_capability: str | None  # "9.0" on CUDA
    quantization: str | None
    kernels: str  # the backend's kernel bundle (drafter/kernels.py), its modes below
    attention: str  # multi-row attention: exact, polyexp or vector (drafter/attention.py)
    linear: str  # how products run: rowwise, padded, columns or matrix (drafter/linear.py)
    activation: str  # the feed-forward's SwiGLU: mlx or polyexp (drafter/activation.py)
    # tokens the draft head scores: its checkpoint's draft vocabulary, else the whole
    # vocabulary; None without a drafter
    draft_head_tokens: int | None
    exactness: str  # exact, rounding, differs, off, n/a (drafter/probe.py)
    divergences: NotRequired[int]  # these four when the probe ran (ProbeFields)
    max_margin: NotRequired[float | None]
    kernel_noise: NotRequired[float]
    probe_tokens: NotRequired[int]
    warm_up_s: float | None  # None: no warm-up ran (CPU, or switched off)
    # crossing rows the warm-up left unmet (drafter/warmup.py: WarmUp); 0 as a rule
    warm_up_unmet: int | None
    prompt_cache_bytes: int
    # a hit restores a multiple of this many prompt rows: 1 where hits are exact, else
    # the prefill chunk (drafter/prompt_cache.py); None with the cache off
    prompt_cache_step: int | None
