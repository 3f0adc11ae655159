"""`draftwise bench`: the width sweep, one real server per arm.

Arms: classic decode (`--draft-model none`) first, each width in between
(`--draft-block-size N`; with `--compare-drafter`, each width a second time with that
drafter; with `--compare-server-arg`, classic and each width a second time with those
flags), classic again last as the drift control. Each arm is
a fresh `draftwise serve` process started and stopped here; every request is a
streaming `/v1/completions` at temperature 0 with `ignore_eos`, so every arm
emits the same number of tokens. One warm-up pass is discarded, then n passes
over the fixed prompts are timed from request start to the last text chunk.
The server's own counters (`usage.draftwise`) give rounds, drafts and accepted
tokens. The record (server/tooling/bench_record.py) goes to docs/benchmark_results/.

This module imports no MLX: the servers do the work, and a child process
reports the host's MLX build, device and BLAS in the servers' environment.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import sha256
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from drafter.cpu_blas import blas_kind
from drafter.diagnostics import SpeculativeConfig
from policy import OVERRIDE_ENV_VARS
from server.blas import (
    BLAS_ENV,
    BLAS_MODES,
    REEXEC_MARKER,
    BlasSettingError,
    planned_environment,
    preloaded,
)
from server.tooling.bench_record import (
    Arm,
    Request,
    Run,
    build_record,
    render_markdown,
    write_record,
)

HOST = "127.0.0.1"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT_DIR = Path("docs/benchmark_results")
DEFAULT_WIDTHS: tuple[int, ...] = (2, 3, 4, 5, 6, 8, 16)
# Fixed prompts: one code, one prose. Completions mode, no chat template.
DEFAULT_PROMPTS: tuple[str, ...] = (
    "import os\nimport re\n\n\ndef find_files(root, pattern):\n"
    '    """Yield every file path under root whose name matches the regex pattern."""\n',
    "The history of the printing press begins in the fifteenth century, when",
)
# Held-out and short everyday prompts, the set the drafter's records are measured on.
EVAL_PROMPTS = Path(__file__).with_name("eval_prompts.json")
# All 22 short evaluation prompts of the drafter issue (code, prose, chat).
SHORT_PROMPTS_FILE = Path(__file__).with_name("short_prompts.json")
# The first 16 held-out prompts of each kind (code, prose, chat): the drafter issue's
# held-out acceptance, measured served.
HELD_OUT_PROMPTS_FILE = Path(__file__).with_name("heldout_prompts.json")
SERVER_MODE = "server (one draftwise serve process per arm, one arm after another)"
SERVER_INTERLEAVED_MODE = (
    "server, interleaved (one draftwise serve process per arm, all up at once; "
    "each pass visits every arm in sweep order)"
)
# `draftwise serve` through the lab entry, so an arm's server args may pin kernel modes.
SERVE_ENTRY = "import sys; from server.tooling.lab import main; sys.exit(main())"
HOST_PROBE = """
import json, os, sys
from drafter.cpu_blas import blas_in_use
import mlx.core as mx
info = {k: (v if isinstance(v, (int, float, str, bool)) else str(v))
        for k, v in mx.device_info().items()}
print(json.dumps({"mlx": mx.__version__, "default_device": str(mx.default_device()),
                  "device_info": info, "blas": blas_in_use()}))
"""

Progress = Callable[[str], None]


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class BenchConfig:
    widths: tuple[int, ...] = DEFAULT_WIDTHS
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    prompt_kinds: tuple[str, ...] | None = None  # one per prompt, from a --prompts-file
    max_tokens: int = 128
    n: int = 3
    warmup: int = 1
    model: str | None = None  # None: the server's default pair
    draft_model: str | None = None  # None: the server's default drafter
    # a second drafter: every width also runs with it, in the same sweep (server arms only)
    compare_drafter: str | None = None
    # extra `draftwise serve` flags: every width also runs with them, in the same sweep
    compare_server_args: tuple[str, ...] = ()
    dtype: str | None = None
    exactness: str | None = None
    cache_dir: str | None = None
    blas: str = "auto"
    server_args: tuple[str, ...] = ()
    ready_timeout_s: float = 900.0
    request_timeout_s: float = 900.0
    name: str | None = None
    log_dir: Path | None = None
    interleave: bool = False
    command: str = "run_sweep()"
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


# ---- the servers ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ArmPlan:
    """One arm of a sweep: classic decode when width is None, else this width with
    `drafter` (None: the sweep's --draft-model) and `server_args` after the sweep's."""

    label: str
    width: int | None
    drafter: str | None = None
    server_args: tuple[str, ...] = ()


def serve_command(config: BenchConfig, arm: ArmPlan, port: int) -> list[str]:
    """`draftwise serve` for one arm: classic when its width is None."""
    command = [sys.executable, "-c", SERVE_ENTRY, "serve", "--host", HOST, "--port", str(port)]
    options = {"--model": config.model, "--dtype": config.dtype, "--cache-dir": config.cache_dir}
    options["--exactness"] = config.exactness
    # Every pass repeats the same prompts: with a prompt cache, later passes would time
    # decoding without its prefill. (A --server-arg given later wins.)
    options["--prompt-cache-bytes"] = "0"
    if arm.width is None:
        options["--draft-model"] = "none"
    else:
        options["--draft-model"] = arm.drafter or config.draft_model
        options["--draft-block-size"] = str(arm.width)
    for flag, value in options.items():
        if value is not None:
            command += [flag, str(value)]
    return command + list(config.server_args) + list(arm.server_args)


def server_environment(environ: Mapping[str, str], blas: str) -> dict[str, str]:
    """The servers' environment: no width override variables (the flag is the arm), the
    package importable, and the BLAS chosen here, preloaded already so no server re-execs."""
    if blas not in BLAS_MODES:
        raise BenchError(f"--blas {blas!r} is not one of {', '.join(BLAS_MODES)}")
    env = {k: v for k, v in environ.items() if k not in OVERRIDE_ENV_VARS}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), environ.get("PYTHONPATH", "")) if p
    )
    env[BLAS_ENV] = blas
    env.pop(REEXEC_MARKER, None)
    # Keep preloads that are not a BLAS (blas_kind calls any other library "reference").
    env["LD_PRELOAD"] = " ".join(p for p in preloaded(env) if blas_kind(p) == "reference")
    try:
        planned, _ = planned_environment(env)
    except BlasSettingError as error:
        raise BenchError(f"--blas {blas}: {error}") from error
    return planned if planned is not None else env


class Server:
    """One `draftwise serve` child: started, waited for, stopped (SIGTERM, then SIGKILL)."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        port: int,
        log_path: Path,
        cwd: Path | None = None,
    ) -> None:
        self.command, self.env, self.port, self.log_path = command, env, port, log_path
        self.cwd = cwd  # `python -c` imports from here first
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Poll /health until the server answers 200; return its JSON."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BenchError(
                    f"server exited with status {self.process.returncode} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                status, body = get_json(self.port, "/health", timeout_s=5)
            except OSError:
                status, body = 0, {}
            if status == 200:
                return body
            time.sleep(0.25)
        raise BenchError(f"server not ready after {timeout_s:.0f} s; log {self.log_path}")


def get_json(port: int, path: str, timeout_s: float) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else {}
    finally:
        conn.close()


# ---- one request -----------------------------------------------------------------------


def stream_completion(
    port: int, model: str, prompt: str, max_tokens: int, timeout_s: float
) -> tuple[str, float, float, dict[str, Any]]:
    """(text, seconds to first text chunk, seconds to last text chunk, usage) of one
    streaming greedy completion; times run from just before the request is sent."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    texts: list[str] = []
    first = last = None
    usage: dict[str, Any] | None = None
    try:
        start = time.perf_counter()
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        if response.status != 200:
            raise BenchError(f"/v1/completions answered {response.status}: {response.read()!r}")
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise BenchError(f"stream error: {chunk['error']}")
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    last = time.perf_counter() - start
                    first = last if first is None else first
                    texts.append(choice["text"])
            usage = chunk.get("usage") or usage
    finally:
        conn.close()
    if first is None or last is None or usage is None:
        raise BenchError("the stream ended without text or without a usage chunk")
    return "".join(texts), first, last, usage


def measure_request(
    port: int, model: str, prompt_index: int, prompt: str, config: BenchConfig
) -> tuple[Request, str]:
    text, first, last, usage = stream_completion(
        port, model, prompt, config.max_tokens, config.request_timeout_s
    )
    counters = usage.get("draftwise") or {}
    request = Request(
        prompt_index=prompt_index,
        tokens=int(usage["completion_tokens"]),
        e2e_s=last,
        ttft_s=first,
        rounds=int(counters.get("rounds") or 0),
        drafted=int(counters.get("drafted") or 0),
        accepted=int(counters.get("accepted") or 0),
        sha256=sha256(text.encode()).hexdigest(),
    )
    return request, text


# ---- one arm and the sweep -------------------------------------------------------------


def arm_label(width: int | None, position: str = "") -> str:
    return f"classic{position}" if width is None else f"width {width}"


def speculative_config(health: Mapping[str, Any]) -> SpeculativeConfig:
    """/health's "speculative" block, checked against the loader's own type."""
    try:
        return TypeAdapter(SpeculativeConfig).validate_python(health["speculative"])
    except (KeyError, ValidationError) as error:
        raise BenchError(f"/health has no valid 'speculative' block: {error}") from None


def served_summary(health: Mapping[str, Any]) -> dict[str, Any]:
    """What a record says of the server that ran an arm."""
    keys: tuple[str, ...] = ("block_size", "source", "reason", "speculative", "drafter", "backend")
    keys += ("compute_capability", "quantization", "exactness", "model_path")
    spec = speculative_config(health)
    summary: dict[str, Any] = {key: spec.get(key) for key in keys}
    summary.update(model=health.get("model"), blas=health.get("blas"))
    return summary


@dataclass
class LiveArm:
    """A ready server for one arm and the passes measured on it so far."""

    label: str
    width: int | None
    server: Server
    model: str
    served: dict[str, Any]
    progress: Progress
    runs: list[Run] = field(default_factory=list)

    def measure_pass(self, config: BenchConfig) -> None:
        requests = tuple(
            measure_request(self.server.port, self.model, index, prompt, config)[0]
            for index, prompt in enumerate(config.prompts)
        )
        self.runs.append(Run(requests))
        name = _run_name(len(self.runs) - 1, config)
        self.progress(f"{self.label}: {name} {_describe_run(self.runs[-1], config)}")

    def arm(self, warmup: int) -> Arm:
        served = {**self.served, "load_average_after": load_average()}
        return Arm(self.label, self.width, self.runs[warmup:], self.runs[:warmup], served)


def start_arm(
    config: BenchConfig,
    plan: ArmPlan,
    env: dict[str, str],
    log_dir: Path,
    progress: Progress,
    stack: ExitStack,
) -> LiveArm:
    """Start this arm's server (stopped when `stack` closes) and wait until it serves."""
    port, label = free_port(), plan.label
    log_path = log_dir / f"{label.replace(' ', '-').replace('(', '').replace(')', '')}.log"
    progress(f"{label}: starting server on port {port} (log {log_path})")
    started = time.monotonic()
    server = stack.enter_context(Server(serve_command(config, plan, port), env, port, log_path))
    served = served_summary(server.wait_ready(config.ready_timeout_s))
    _, models = get_json(port, "/v1/models", timeout_s=30)
    progress(f"{label}: ready in {time.monotonic() - started:.1f} s, serving {_served(served)}")
    return LiveArm(label, plan.width, server, models["data"][0]["id"], served, progress)


def run_arms_in_turn(
    config: BenchConfig, env: dict[str, str], log_dir: Path, progress: Progress
) -> list[Arm]:
    """One server at a time: start it, make every pass, stop it."""
    plan = sweep_plan(config)
    arms = []
    for index, arm_plan in enumerate(plan, start=1):
        tagged = _prefixed(progress, f"[{index}/{len(plan)}]")
        with ExitStack() as stack:
            live = start_arm(config, arm_plan, env, log_dir, tagged, stack)
            for _ in range(config.warmup + config.n):
                live.measure_pass(config)
            arms.append(live.arm(config.warmup))
    return arms


def run_arms_interleaved(
    config: BenchConfig, env: dict[str, str], log_dir: Path, progress: Progress
) -> list[Arm]:
    """Every server up at once; each pass visits the arms in sweep order (classic first and
    last), so load that comes and goes on the host hits every arm alike."""
    plan = sweep_plan(config)
    with ExitStack() as stack:
        live = []
        for index, arm_plan in enumerate(plan, start=1):
            tagged = _prefixed(progress, f"[{index}/{len(plan)}]")
            live.append(start_arm(config, arm_plan, env, log_dir, tagged, stack))
        for _ in range(config.warmup + config.n):
            for arm in live:
                arm.measure_pass(config)
        return [arm.arm(config.warmup) for arm in live]


def _prefixed(progress: Progress, tag: str) -> Progress:
    return progress if not tag else lambda message: progress(f"{tag} {message}")


def _served(served: Mapping[str, Any]) -> str:
    if not served:
        return "(no speculative config in /health)"
    if not served.get("speculative"):
        return f"classic decode (exactness={served.get('exactness')})"
    return f"width {served.get('block_size')} ({served.get('source')})"


def _run_name(index: int, config: BenchConfig) -> str:
    if index < config.warmup:
        return f"warm-up {index + 1}/{config.warmup} (discarded)"
    return f"run {index - config.warmup + 1}/{config.n}"


def _describe_run(run: Run, config: BenchConfig) -> str:
    text = f"{run.tok_s:.2f} tok/s, {run.tokens} tokens in {run.seconds:.2f} s"
    if sum(r.rounds for r in run.requests):
        text += f", {run.tokens / run.rounds:.2f} emitted/round"
    expected = config.max_tokens * len(config.prompts)
    if run.tokens != expected:
        text += f" (SHORT: {run.tokens}/{expected} tokens; does the server honour ignore_eos?)"
    return text


def sweep_plan(config: BenchConfig) -> list[ArmPlan]:
    """Classic first and last; each width in between, right after it the same width with
    the compare drafter and then with the compare server flags, when there are. Server
    flags may change classic decode too (a dtype, the activation), so with them classic
    runs once more with them, right after the first classic arm."""
    extra = config.compare_server_args
    flags = f" ({shlex.join(extra)})"  # the label of an arm run with them
    middle = [ArmPlan(f"classic{flags}", None, server_args=extra)] if extra else []
    for width in config.widths:
        middle.append(ArmPlan(arm_label(width), width))
        if config.compare_drafter:
            name = Path(config.compare_drafter).name
            middle.append(ArmPlan(f"{arm_label(width)} ({name})", width, config.compare_drafter))
        if extra:
            middle.append(ArmPlan(f"{arm_label(width)}{flags}", width, server_args=extra))
    return [ArmPlan("classic (first)", None), *middle, ArmPlan("classic (last)", None)]


def run_sweep(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Run every arm in order and return the record (not yet written)."""
    check_config(config)
    env = server_environment(config.environ, config.blas)
    started = datetime.now(UTC)
    log_dir = config.log_dir or Path(tempfile.mkdtemp(prefix="draftwise-bench-"))
    host = host_info(env)
    progress(f"host: {host.get('cpu') or host.get('gpu')}; blas {host.get('blas')}")
    run_arms = run_arms_interleaved if config.interleave else run_arms_in_turn
    arms = run_arms(config, env, log_dir, progress)
    mode = SERVER_INTERLEAVED_MODE if config.interleave else SERVER_MODE
    setup = sweep_setup(config, served_by(arms), started, mode)
    setup.update(server_args=list(config.server_args), server_logs=str(log_dir))
    name = config.name or default_name(host, setup, started)
    host["load_average_end"] = load_average()
    return build_record(name=name, arms=arms, setup=setup, host=host)


def check_config(config: BenchConfig) -> None:
    if config.n < 1 or config.warmup < 0 or config.max_tokens < 1:
        raise BenchError("need n >= 1, warmup >= 0 and max_tokens >= 1")
    if not config.prompts:
        raise BenchError("need at least one prompt")
    if any(width < 2 for width in config.widths):
        raise BenchError(f"widths must be >= 2, got {list(config.widths)}")
    if config.compare_drafter and not Path(config.compare_drafter).is_dir():
        raise BenchError(f"--compare-drafter {config.compare_drafter}: not a directory")


def served_by(arms: Sequence[Arm]) -> dict[str, Any]:
    """What a speculative arm's server reported (drafter, backend, quantization, ...)."""
    return next((arm.served for arm in arms if arm.served.get("speculative")), arms[0].served)


def sweep_setup(
    config: BenchConfig, served: Mapping[str, Any], started: datetime, mode: str
) -> dict[str, Any]:
    return {
        "started": started.isoformat(timespec="seconds"),
        "command": config.command,
        "mode": mode,
        "target": config.model or "default pair (SmolLM2-135M-Instruct)",
        "drafter": served.get("drafter") or config.draft_model or "default drafter",
        "target_files": describe_model_dir(served.get("model_path") or config.model),
        "drafter_files": describe_model_dir(served.get("drafter") or config.draft_model),
        **(
            {
                "compare_drafter": config.compare_drafter,
                "compare_drafter_files": describe_model_dir(config.compare_drafter),
            }
            if config.compare_drafter
            else {}
        ),
        **(
            {"compare_server_args": list(config.compare_server_args)}
            if config.compare_server_args
            else {}
        ),
        "dtype": config.dtype or "server default",
        "quantization": served.get("quantization"),
        "backend": served.get("backend"),
        "compute_capability": served.get("compute_capability"),
        "exactness": served.get("exactness", config.exactness or "server default"),
        "blas_setting": f"{BLAS_ENV}={config.blas}",
        "widths": list(config.widths),
        "max_tokens": config.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "prompts": list(config.prompts),
        **({"prompt_kinds": list(config.prompt_kinds)} if config.prompt_kinds else {}),
    }


def describe_model_dir(path: str | None) -> dict[str, Any] | None:
    """Size on disk and the config fields that identify a model directory."""
    if not path or not Path(path).is_dir():
        return None
    root = Path(path)
    size = sum(f.stat().st_size for f in root.glob("*.safetensors"))
    config = (
        json.loads((root / "config.json").read_text()) if (root / "config.json").is_file() else {}
    )
    keys: tuple[str, ...] = ("model_type", "architectures", "hidden_size", "num_hidden_layers")
    keys += ("vocab_size",)
    keys += ("block_size", "quantization", "torch_dtype")
    return {
        "path": str(root),
        "safetensors_bytes": size,
        **{k: config[k] for k in keys if k in config},
    }


def default_name(host: Mapping[str, Any], setup: Mapping[str, Any], started: datetime) -> str:
    backend = setup.get("backend") or "unknown"
    device = "cpu" if backend == "cpu" else f"{backend}{setup.get('compute_capability') or ''}"
    quant = setup.get("quantization") or setup.get("dtype", "").replace("server default", "auto")
    blas = str(host.get("blas", "")).split(" ")[0] if backend == "cpu" else ""
    target = Path(str(setup.get("target"))).name.split(" ")[0].lower()
    parts = [device, target, quant, blas, started.strftime("%Y%m%dT%H%M")]
    return "-".join(p for p in parts if p).replace("/", "-").replace(".", "_")


# ---- host ------------------------------------------------------------------------------


def host_info(env: Mapping[str, str]) -> dict[str, Any]:
    """CPU, cores, memory, BLAS, GPU (compute capability, driver), MLX and mlx-lm versions."""
    info: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count()}
    info["memory_gib"] = memory_gib()
    info["load_average_start"] = load_average()
    probe = probe_mlx(env)
    info["blas"] = probe.get("blas", "unknown")
    info["mlx"] = probe.get("mlx") or _version("mlx")
    info["mlx_lm"] = _version("mlx-lm")
    info["mlx_device"] = probe.get("default_device")
    device_info = probe.get("device_info") or {}
    if "compute_capability_major" in device_info:
        major, minor = (
            device_info["compute_capability_major"],
            device_info["compute_capability_minor"],
        )
        info["gpu"] = f"{device_info.get('device_name')} (compute capability {major}.{minor})"
    info.update(nvidia_smi())
    info["platform"] = platform.platform()
    info["python"] = platform.python_version()
    info["draftwise_commit"] = git_commit()
    return info


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """1/5/15-minute load: other work on the host skews a CPU sweep."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def probe_mlx(env: Mapping[str, str]) -> dict[str, Any]:
    """MLX version, default device, device_info and BLAS, from a child in the servers' env."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", HOST_PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def nvidia_smi() -> dict[str, str]:
    if shutil.which("nvidia-smi") is None:
        return {}
    query = "name,driver_version,compute_cap,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    rows = [line for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not rows:
        return {}
    name, driver, capability, memory = (part.strip() for part in rows[0].split(","))
    return {
        "nvidia_smi": f"{len(rows)} x {name}, compute capability {capability}, {memory}",
        "driver": driver,
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """`git describe` of the checkout the servers run from; else the installed version."""
    fallback = f"draftwise {_version('draftwise')} (no git checkout)"
    try:
        out = subprocess.run(
            ["git", "-C", str(PACKAGE_ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return fallback
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else fallback


# ---- CLI -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptsFile:
    """A --prompts-file: its prompts and, when it names them, each prompt's kind
    (code, prose, chat, ...), which the record then sums up per kind."""

    prompts: tuple[str, ...]
    kinds: tuple[str, ...] | None = None

    def first_per_kind(self, n: int) -> PromptsFile:
        """The first n prompts of each kind, in the file's order (--per-kind)."""
        if self.kinds is None:
            raise BenchError("--per-kind needs a --prompts-file that names each prompt's kind")
        taken: Counter[str] = Counter()
        keep = []
        for prompt, kind in zip(self.prompts, self.kinds, strict=True):
            taken[kind] += 1
            if taken[kind] <= n:
                keep.append((prompt, kind))
        return PromptsFile(tuple(p for p, _ in keep), tuple(k for _, k in keep))


def read_prompts_file(value: str) -> PromptsFile:
    try:
        data = json.loads(Path(value).read_text())
        prompts, kinds = data["prompts"], data.get("kinds")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"--prompts-file {value}: {exc}") from exc
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise argparse.ArgumentTypeError(
            f"--prompts-file {value}: 'prompts' must be a non-empty list of non-empty strings"
        )
    if kinds is not None and (
        not isinstance(kinds, list)
        or len(kinds) != len(prompts)
        or not all(isinstance(k, str) and k for k in kinds)
    ):
        raise argparse.ArgumentTypeError(
            f"--prompts-file {value}: 'kinds' must name one kind per prompt ({len(prompts)})"
        )
    return PromptsFile(tuple(prompts), None if kinds is None else tuple(kinds))


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments `draftwise bench` and `draftwise calibrate` share."""
    parser.add_argument("--model", default=None, help="target dir (default: the default pair)")
    parser.add_argument(
        "--draft-model", default=None, help="drafter dir (default: default drafter)"
    )
    parser.add_argument("--widths", type=_widths, default=DEFAULT_WIDTHS, metavar="2,3,4")
    parser.add_argument("--prompt", action="append", default=None, help="repeatable")
    parser.add_argument(
        "--prompts-file",
        type=read_prompts_file,
        default=None,
        metavar="JSON",
        help=(
            f'prompts from a JSON file ({{"prompts": [...], "kinds": [...] optional}}), e.g. '
            f"{EVAL_PROMPTS}, {SHORT_PROMPTS_FILE} or {HELD_OUT_PROMPTS_FILE}"
        ),
    )
    parser.add_argument(
        "--per-kind",
        type=_positive,
        default=None,
        metavar="N",
        help="only the first N prompts of each kind of the --prompts-file, e.g. 8 of "
        "the held-out file's code, prose and chat",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="token budget per request")
    parser.add_argument("-n", type=int, default=3, help="timed passes per arm")
    parser.add_argument("--warmup", type=int, default=1, help="discarded passes per arm")
    parser.add_argument("--dtype", default=None, choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument(
        "--exactness", default=None, choices=("strict", "require", "rounding", "warn", "off")
    )
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--blas", default="auto", choices=BLAS_MODES)
    parser.add_argument("--server-arg", action="append", default=[], help="passed to serve")
    parser.add_argument("--ready-timeout", type=float, default=900.0, metavar="S")
    parser.add_argument("--log-dir", type=Path, default=None, help="server logs (default: tmp)")
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="start every arm's server at once and rotate passes through the arms "
        "(robust to load that comes and goes on a shared host)",
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench", help="sweep draft widths against classic decode, one server per arm"
    )
    add_sweep_arguments(parser)
    parser.add_argument("--name", default=None, help="record name (default: host-pair-date)")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    parser.add_argument(
        "--in-process", action="store_true", help="quick sweep in this process, widths interleaved"
    )
    parser.add_argument(
        "--compare-drafter",
        default=None,
        metavar="DIR",
        help="a second drafter: every width also runs with it, in the same sweep (labelled "
        "'width N (DIR name)'), e.g. a retrained drafter or one without its draft vocabulary",
    )
    parser.add_argument(
        "--compare-server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="repeatable: classic and every width also run with these extra serve "
        "arguments, in the same sweep (labelled 'classic (ARGS)', 'width N (ARGS)'), e.g. "
        "--compare-server-arg=--dtype --compare-server-arg=bfloat16",
    )
    parser.set_defaults(func=run_bench)
    return parser


def prompts_file(args: argparse.Namespace) -> PromptsFile | None:
    """The --prompts-file, cut to its first --per-kind prompts of each kind if asked."""
    if args.per_kind is None:
        return args.prompts_file
    if args.prompts_file is None:
        raise BenchError("--per-kind needs a --prompts-file")
    return args.prompts_file.first_per_kind(args.per_kind)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Raises BenchError for arguments that contradict each other."""
    from_file = prompts_file(args)
    prompts = tuple(args.prompt or ()) + (from_file.prompts if from_file else ())
    return BenchConfig(
        widths=tuple(args.widths),
        prompts=prompts or DEFAULT_PROMPTS,
        prompt_kinds=None if args.prompt or not from_file else from_file.kinds,
        max_tokens=args.max_tokens,
        n=args.n,
        warmup=args.warmup,
        model=args.model,
        draft_model=args.draft_model,
        compare_drafter=getattr(args, "compare_drafter", None),
        compare_server_args=tuple(getattr(args, "compare_server_arg", ())),
        dtype=args.dtype,
        exactness=args.exactness,
        cache_dir=args.cache_dir,
        blas=args.blas,
        server_args=tuple(args.server_arg),
        ready_timeout_s=args.ready_timeout,
        name=getattr(args, "name", None),
        log_dir=args.log_dir,
        interleave=args.interleave,
        command="draftwise " + shlex.join(sys.argv[1:]),
    )


def print_progress(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} {message}", file=sys.stderr, flush=True)


def run_bench(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        if args.in_process:
            from server.tooling.bench_inprocess import run_in_process, use_chosen_blas

            print_progress(f"blas: {use_chosen_blas(config)}")
            record = run_in_process(config, print_progress)
        else:
            record = run_sweep(config, print_progress)
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    md, js = write_record(record, args.out_dir)
    print(render_markdown(record))
    print(f"wrote {md} and {js}", file=sys.stderr)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def _widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of widths") from error
    if not widths or any(w < 2 for w in widths):
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be integers >= 2")
    return widths
