"""The width sweep harness: verdict/range logic, and a real sweep over a tiny saved pair."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import write_random_drafter
from server.blas import BLAS_ENV, REEXEC_MARKER, find_mkl, find_openblas
from server.tooling.bench import (
    ArmPlan,
    BenchConfig,
    BenchError,
    run_sweep,
    serve_command,
    server_environment,
    speculative_config,
    sweep_plan,
)
from server.tooling.bench_inprocess import run_in_process
from server.tooling.bench_record import (
    ABOVE,
    BELOW,
    OVERLAPPING,
    Arm,
    Range,
    Request,
    Run,
    all_widths_lose,
    best_width,
    build_record,
    render_markdown,
    verdict,
    write_record,
)

MAX_TOKENS = 8
PROMPT = "def add(a, b):\n    return"


# ---- pure: ranges and verdicts ----------------------------------------------------------


def run_at(tok_s: float, sha: str = "same", rounds: int = 0, accepted: int = 0) -> Run:
    """A one-request run emitting 100 tokens at tok_s."""
    request = Request(0, 100, 100 / tok_s, 0.01, rounds, rounds * 3, accepted, sha)
    return Run((request,))


def arm(label: str, width: int | None, *speeds: float, sha: str = "same", **served: Any) -> Arm:
    return Arm(label, width, [run_at(s, sha) for s in speeds], [run_at(speeds[0], sha)], served)


def sweep(*middle: Arm) -> dict:
    arms = [
        arm("classic (first)", None, 10, 11, 12),
        *middle,
        arm("classic (last)", None, 11, 12, 13),
    ]
    return build_record(name="t", arms=arms, setup={}, host={})


def test_range_is_min_median_max() -> None:
    assert Range.of([3.0, 1.0, 2.0]) == Range(1.0, 2.0, 3.0)


def test_verdict_is_above_or_below_only_with_disjoint_ranges() -> None:
    classic = Range(10, 11, 12)
    assert verdict(Range(12.1, 13, 14), classic) == ABOVE
    assert verdict(Range(8, 9, 9.9), classic) == BELOW
    assert verdict(Range(12, 13, 14), classic) == OVERLAPPING  # touching counts as overlap
    assert verdict(Range(9, 11, 13), classic) == OVERLAPPING


def test_widths_are_judged_against_the_union_of_both_classic_arms() -> None:
    record = sweep(arm("width 4", 4, 12.5, 12.6, 12.7), arm("width 8", 8, 13.5, 14, 14.5))
    assert record["control"]["union"] == {"low": 10, "median": 11.5, "high": 13}
    verdicts = {a["width"]: a["verdict"] for a in record["arms"]}
    assert verdicts == {None: None, 4: OVERLAPPING, 8: ABOVE}


def test_control_reports_drift_between_first_and_last_classic_arm() -> None:
    record = sweep(arm("width 2", 2, 5, 6, 7))
    assert record["control"]["drift"] == pytest.approx((12 - 11) / 11)
    assert record["control"]["overlapping"] is True
    assert record["n"] == 3 and record["warmup"] == 1


def test_a_sweep_must_start_and_end_with_classic() -> None:
    with pytest.raises(ValueError, match="classic"):
        build_record(name="t", arms=[arm("w", 2, 1.0), arm("c", None, 1.0)], setup={}, host={})


def test_byte_identity_compares_each_arm_text_with_classic() -> None:
    record = sweep(arm("width 2", 2, 20, 21, 22), arm("width 3", 3, 30, 31, 32, sha="other"))
    identical = {a["width"]: a["identical_to_classic"] for a in record["arms"]}
    assert identical == {None: True, 2: True, 3: False}


def test_best_width_is_the_fastest_exact_width_above_classic() -> None:
    record = sweep(
        arm("width 2", 2, 20, 21, 22),
        arm("width 3", 3, 30, 31, 32, sha="other"),  # fastest, but not byte-identical
        arm("width 4", 4, 23, 24, 25),
        arm("width 8", 8, 9, 10, 11),
    )
    assert best_width(record) == 4
    assert not all_widths_lose(record)


def test_every_width_loses_when_all_are_below_or_inexact() -> None:
    record = sweep(arm("width 2", 2, 5, 6, 7), arm("width 3", 3, 30, 31, 32, sha="other"))
    assert best_width(record) is None
    assert all_widths_lose(record)


def test_an_overlapping_width_is_neither_a_win_nor_a_loss() -> None:
    record = sweep(arm("width 2", 2, 5, 6, 7), arm("width 4", 4, 11, 12, 13))
    assert best_width(record) is None
    assert not all_widths_lose(record)


def test_a_width_the_server_did_not_serve_gets_no_speed_verdict() -> None:
    fallback = arm("width 4", 4, 30, 31, 32, speculative=False, block_size=4)
    record = sweep(fallback)
    assert record["arms"][1]["verdict"] == "not served at width 4 (served None)"
    assert best_width(record) is None


def test_counters_give_acceptance_length_emitted_per_round_and_time_per_round() -> None:
    request = Request(
        0, tokens=40, e2e_s=2.0, ttft_s=0.1, rounds=10, drafted=30, accepted=25, sha256="x"
    )
    counters = Arm("width 4", 4, [Run((request,))]).counters()
    assert counters["acceptance_length"] == pytest.approx(3.5)  # (25 accepted + 10 bonus) / 10
    assert counters["emitted_per_round"] == pytest.approx(4.0)
    assert counters["time_per_round_ms"] == pytest.approx(200.0)
    classic = Arm("classic", None, [run_at(50.0)]).counters()
    assert classic["acceptance_length"] is None and classic["emitted_per_round"] == 1.0


# ---- pure: how arms are started -----------------------------------------------------------


def test_classic_arm_serves_without_drafter_and_width_arms_pass_the_flag() -> None:
    config = BenchConfig(model="/m", draft_model="/d", dtype="float32")
    classic = serve_command(config, ArmPlan("classic", None), 9000)
    width = serve_command(config, ArmPlan("width 5", 5), 9000)
    assert classic[classic.index("--draft-model") + 1] == "none"
    assert "--draft-block-size" not in classic
    assert width[width.index("--draft-model") + 1] == "/d"
    assert width[width.index("--draft-block-size") + 1] == "5"
    assert width[width.index("--dtype") + 1] == "float32"
    assert classic[classic.index("--prompt-cache-bytes") + 1] == "0"  # passes repeat prompts


def test_a_compare_drafter_runs_each_width_again_right_after_it_with_that_drafter() -> None:
    config = BenchConfig(widths=(4, 8), draft_model="/d", compare_drafter="/x/full-head")
    plan = sweep_plan(config)
    assert [(arm.label, arm.width) for arm in plan] == [
        ("classic (first)", None),
        ("width 4", 4), ("width 4 (full-head)", 4),
        ("width 8", 8), ("width 8 (full-head)", 8),
        ("classic (last)", None),
    ]  # fmt: skip
    commands = [serve_command(config, arm, 9000) for arm in plan[1:3]]
    assert [c[c.index("--draft-model") + 1] for c in commands] == ["/d", "/x/full-head"]
    assert [a.label for a in sweep_plan(BenchConfig(widths=(4,)))][1:-1] == ["width 4"]


def test_compare_server_args_run_classic_and_each_width_again_with_those_flags_last() -> None:
    extra = ("--dtype", "bfloat16")
    config = BenchConfig(widths=(4, 8), server_args=("--log-level", "debug"))
    config = replace(config, compare_server_args=extra)
    plan = sweep_plan(config)
    assert [arm.label for arm in plan] == [
        "classic (first)", "classic (--dtype bfloat16)",
        "width 4", "width 4 (--dtype bfloat16)",
        "width 8", "width 8 (--dtype bfloat16)",
        "classic (last)",
    ]  # fmt: skip
    classic, plain, compared = (serve_command(config, arm, 9000) for arm in plan[1:4])
    assert classic[classic.index("--draft-model") + 1] == "none"
    assert classic[-4:] == ["--log-level", "debug", "--dtype", "bfloat16"]
    assert plain[-2:] == ["--log-level", "debug"]
    assert compared[-4:] == ["--log-level", "debug", "--dtype", "bfloat16"]


def test_in_process_refuses_a_compare_drafter_before_loading_anything() -> None:
    with pytest.raises(BenchError, match="--compare-drafter needs a server per arm"):
        run_in_process(BenchConfig(widths=(4,), compare_drafter="/x"), print)
    with pytest.raises(BenchError, match="--compare-server-arg needs a server per arm"):
        config = BenchConfig(widths=(4,), compare_server_args=("--dtype", "bfloat16"))
        run_in_process(config, print)


def test_server_environment_drops_width_variables_and_sets_the_blas() -> None:
    environ = {"LLAMA_ARG_DRAFT_BLOCK_SIZE": "4", "DRAFTWISE_DRAFT_BLOCK_SIZE": "3", "PATH": "/bin"}
    bundled = server_environment(environ, "bundled")
    assert "LLAMA_ARG_DRAFT_BLOCK_SIZE" not in bundled
    assert "DRAFTWISE_DRAFT_BLOCK_SIZE" not in bundled
    assert bundled[BLAS_ENV] == "bundled" and bundled["LD_PRELOAD"] == ""
    openblas = server_environment({**environ, "LD_PRELOAD": "/opt/libfoo.so"}, "openblas")
    assert openblas["LD_PRELOAD"] == f"{find_openblas()} /opt/libfoo.so"
    assert openblas[REEXEC_MARKER] == f"openblas ({BLAS_ENV}=openblas)"
    mkl = server_environment({**environ, "LD_PRELOAD": str(find_openblas())}, "mkl")
    assert mkl["LD_PRELOAD"] == str(find_mkl())  # the bench's own BLAS is not passed on
    assert mkl[REEXEC_MARKER] == f"mkl ({BLAS_ENV}=mkl)" and mkl["MKL_CBWR"] == "AUTO,STRICT"


def test_the_speculative_block_of_health_is_read_as_the_loaders_type() -> None:
    block = {
        "block_size": 4,
        "source": "policy",
        "reason": "cpu unquantized dflash: measured",
        "ignored": [],
        "speculative": True,
        "drafter": "/d",
        "model_path": "/m",
        "backend": "cpu",
        "compute_capability": None,
        "quantization": None,
        "kernels": "cpu",
        "attention": "exact",
        "linear": "columns",
        "activation": "mlx",
        "draft_head_tokens": 16384,
        "exactness": "exact",
        "warm_up_s": None,
        "warm_up_unmet": None,
        "prompt_cache_bytes": 0,
        "prompt_cache_step": None,
    }
    assert speculative_config({"status": "ok", "speculative": block}) == block
    with pytest.raises(BenchError, match="no valid 'speculative' block"):
        speculative_config({"status": "ok"})
    with pytest.raises(BenchError, match="block_size"):
        speculative_config({"speculative": {**block, "block_size": "four"}})


def test_bad_sweep_configs_are_refused_before_any_server_starts() -> None:
    with pytest.raises(BenchError, match="widths"):
        run_sweep(BenchConfig(widths=(1,)), print)
    with pytest.raises(BenchError, match="prompt"):
        run_sweep(BenchConfig(prompts=()), print)


# ---- a real sweep: tiny saved pair, real servers ------------------------------------------


def tiny_sweep(root: Path, **changes: Any) -> BenchConfig:
    """A sweep of the tiny pair saved under `root` (target/, drafter/), real servers."""
    fields: dict[str, Any] = {
        "widths": (2,),
        "prompts": (PROMPT,),
        "max_tokens": MAX_TOKENS,
        "n": 1,
        "model": str(root / "target"),
        "draft_model": str(root / "drafter"),
        "exactness": "warn",
        "cache_dir": str(root / "cache"),
        "blas": "bundled",
        "ready_timeout_s": 120,
    }
    return BenchConfig(**(fields | changes))


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[str], Path]:
    root = tmp_path_factory.mktemp("bench")
    write_random_drafter(root / "drafter", write_tiny_model(root / "target"))
    messages: list[str] = []
    config = tiny_sweep(root, warmup=1, name="tiny-sweep", log_dir=root / "logs")
    return run_sweep(config, messages.append), messages, root


def test_sweep_runs_classic_first_and_last_with_each_width_between(
    swept: tuple[dict, list[str], Path],
) -> None:
    record, _, _ = swept
    assert [a["label"] for a in record["arms"]] == ["classic (first)", "width 2", "classic (last)"]
    served = [a["served"] for a in record["arms"]]
    assert [s["speculative"] for s in served] == [False, True, False]
    assert served[1]["block_size"] == 2 and served[1]["source"] == "flag"


def test_sweep_emits_the_full_token_budget_in_every_arm(
    swept: tuple[dict, list[str], Path],
) -> None:
    record, _, _ = swept
    for arm_record in record["arms"]:
        assert arm_record["tokens_per_run"] == MAX_TOKENS
        assert all(r["tokens"] == MAX_TOKENS for run in arm_record["runs"] for r in run)


def test_sweep_times_requests_and_reads_the_server_counters(
    swept: tuple[dict, list[str], Path],
) -> None:
    record, _, _ = swept
    width = record["arms"][1]
    request = width["runs"][0][0]
    assert 0 < request["ttft_s"] <= request["e2e_s"]
    # The server's first request explores the widest width first (drafter/goodput.py);
    # later ones run whatever the control picks, classic for this random drafter.
    assert width["warmup"][0][0]["rounds"] >= 1
    everything = [r for run in width["warmup"] + width["runs"] for r in run]
    assert all(r["drafted"] == r["rounds"] for r in everything)  # width 2: 1 draft a round
    drafted = any(r["rounds"] for run in width["runs"] for r in run)
    if drafted:
        assert width["acceptance_length"] >= 1.0
    else:  # every timed step ran classic: no acceptance to report
        assert width["acceptance_length"] is None
    assert width["time_per_round_ms"] > 0
    assert width["tok_s"]["low"] > 0 and width["speedup"] > 0
    assert width["verdict"] in (ABOVE, OVERLAPPING, BELOW)


def test_sweep_speculative_text_is_byte_identical_to_classic(
    swept: tuple[dict, list[str], Path],
) -> None:
    record, _, _ = swept
    assert all(a["identical_to_classic"] and a["stable"] for a in record["arms"])
    assert len(record["arms"][0]["sha256"][0]) == 64


def test_sweep_record_names_host_mlx_blas_and_setup(swept: tuple[dict, list[str], Path]) -> None:
    record, _, _ = swept
    host, setup = record["host"], record["setup"]
    assert host["cores"] >= 1 and host["cpu"] and host["mlx"] == "0.32.4"
    assert host["blas"].startswith("reference (")  # --blas bundled
    assert setup["backend"] == "cpu" and setup["quantization"] is None
    assert setup["max_tokens"] == MAX_TOKENS and setup["temperature"] == 0.0
    assert setup["prompts"] == [PROMPT] and setup["widths"] == [2]
    assert setup["drafter_files"]["architectures"] == ["DFlashDraftModel"]
    assert record["n"] == 1 and record["control"]["arm"].startswith("classic")


def test_sweep_shows_progress_for_every_arm_and_run(swept: tuple[dict, list[str], Path]) -> None:
    _, messages, _ = swept
    assert any(m.startswith("[1/3] classic (first): ready in") for m in messages)
    assert any(m.startswith("[2/3] width 2: warm-up 1/1 (discarded)") for m in messages)
    assert any(m.startswith("[3/3] classic (last): run 1/1") for m in messages)


def test_sweep_record_is_written_as_markdown_and_json(
    swept: tuple[dict, list[str], Path], tmp_path: Path
) -> None:
    record, _, _ = swept
    md, js = write_record(record, tmp_path)
    assert (md.name, js.name) == ("tiny-sweep.md", "tiny-sweep.json")
    assert json.loads(js.read_text()) == record
    text = md.read_text()
    assert text == render_markdown(record)
    assert "| width 2 | 2 |" in text and "Control: classic first" in text
    assert "blas: reference (" in text


def test_an_interleaved_sweep_uses_its_one_classic_arm_as_the_control() -> None:
    record = build_record(
        name="t", arms=[arm("classic", None, 10, 11, 12), arm("width 2", 2, 13, 14, 15)],
        setup={}, host={},
    )  # fmt: skip
    assert record["control"]["last"] is None and record["control"]["drift"] is None
    assert record["control"]["union"] == pytest.approx({"low": 10, "median": 11, "high": 12})
    assert record["arms"][1]["verdict"] == ABOVE
    assert "interleaved" in render_markdown(record)


# ---- in-process: the issue-4 benchmark core, same record -----------------------------------


def test_in_process_sweep_interleaves_widths_and_writes_the_same_record(
    swept: tuple[dict, list[str], Path],
) -> None:
    _, _, root = swept
    messages: list[str] = []
    config = BenchConfig(
        widths=(2, 3),
        prompts=(PROMPT,),
        max_tokens=MAX_TOKENS,
        n=2,
        model=str(root / "target"),
        draft_model=str(root / "drafter"),
        cache_dir=str(root / "cache"),
        name="tiny-in-process",
    )
    record = run_in_process(config, messages.append)
    assert [a["label"] for a in record["arms"]] == ["classic", "width 2", "width 3"]
    assert record["setup"]["mode"].startswith("in-process")
    assert record["n"] == 2 and record["warmup"] == 1
    assert record["control"]["last"] is None
    for arm_record in record["arms"]:
        assert arm_record["tokens_per_run"] == MAX_TOKENS
        assert arm_record["identical_to_classic"] and arm_record["stable"]
    width3 = record["arms"][2]
    assert width3["served"]["block_size"] == 3 and width3["acceptance_length"] >= 1.0
    assert width3["runs"][0][0]["drafted"] == 2 * width3["runs"][0][0]["rounds"]
    assert any("width 3" in m for m in messages)


def test_markdown_breaks_acceptance_down_by_prompt_when_there_are_several() -> None:
    def two_prompt_run(accepted: tuple[int, int]) -> Run:
        return Run(tuple(Request(i, 40, 2.0, 0.1, 10, 30, accepted[i], "s") for i in (0, 1)))

    classic = Arm(
        "classic", None, [Run(tuple(Request(i, 40, 4.0, 0.1, 0, 0, 0, "s") for i in (0, 1)))]
    )
    width = Arm("width 4", 4, [two_prompt_run((25, 5))])
    setup = {"prompts": ["code prompt", "prose prompt"]}
    text = render_markdown(build_record(name="t", arms=[classic, width], setup=setup, host={}))
    assert "| arm | prompt 1: acceptance, tok/s | prompt 2: acceptance, tok/s |" in text
    assert "| width 4 | 3.50, 20.00 | 1.50, 20.00 |" in text
    assert "## By kind" not in text  # the prompts name no kinds


def test_markdown_sums_acceptance_up_by_kind_when_the_prompts_file_names_kinds() -> None:
    # Request(prompt_index, tokens, e2e_s, ttft_s, rounds, drafted, accepted, sha)
    def run(accepted: tuple[int, ...]) -> Run:
        return Run(tuple(Request(i, 40, 2.0, 0.1, 10, 30, a, "s") for i, a in enumerate(accepted)))

    classic = Arm(
        "classic", None, [Run(tuple(Request(i, 40, 4.0, 0.1, 0, 0, 0, "s") for i in range(3)))]
    )
    width = Arm("width 4", 4, [run((25, 5, 15))])
    setup = {"prompts": ["a", "b", "c"], "prompt_kinds": ["code", "prose", "code"]}
    text = render_markdown(build_record(name="t", arms=[classic, width], setup=setup, host={}))
    header = "| arm | code (2): acceptance [range], tok/s | prose (1): acceptance [range], tok/s |"
    assert header in text
    # code: (25 + 15 + 20 rounds) / 20 rounds = 3.00, prompts at 3.50 and 2.50
    assert "| width 4 | 3.00 [2.50-3.50], 20.00 | 1.50 [1.50-1.50], 20.00 |" in text


def test_interleaved_sweep_keeps_every_server_up_and_rotates_passes_through_the_arms(
    swept: tuple[dict, list[str], Path],
) -> None:
    _, _, root = swept
    messages: list[str] = []
    config = tiny_sweep(root, widths=(3,), name="tiny-interleaved", interleave=True)
    record = run_sweep(config, messages.append)
    assert record["setup"]["mode"].startswith("server, interleaved")
    assert [a["label"] for a in record["arms"]] == ["classic (first)", "width 3", "classic (last)"]
    passes = [
        m.split(":")[0] + ":" + m.split(":")[1].split(" ")[1]
        for m in messages
        if " run " in m or "warm-up" in m
    ]
    assert passes == [
        "[1/3] classic (first):warm-up", "[2/3] width 3:warm-up", "[3/3] classic (last):warm-up",
        "[1/3] classic (first):run", "[2/3] width 3:run", "[3/3] classic (last):run",
    ]  # fmt: skip
    assert all(a["identical_to_classic"] for a in record["arms"])
    assert "load_average_after" in record["arms"][1]["served"]


def test_a_sweep_compares_two_drafters_at_the_same_width_in_one_pass(
    swept: tuple[dict, list[str], Path],
) -> None:
    _, _, root = swept
    other = write_random_drafter(root / "drafter-b", root / "target", seed=1)
    config = tiny_sweep(root, widths=(3,), warmup=0, compare_drafter=str(other), interleave=True)
    record = run_sweep(config, lambda _: None)
    arms = record["arms"]
    labels = ["classic (first)", "width 3", "width 3 (drafter-b)", "classic (last)"]
    assert [a["label"] for a in arms] == labels
    assert [a["served"]["drafter"] for a in arms[1:3]] == [str(root / "drafter"), str(other)]
    assert [a["served"]["block_size"] for a in arms[1:3]] == [3, 3]
    assert all(a["identical_to_classic"] for a in arms)  # greedy: any drafter, same text
    assert record["setup"]["compare_drafter"] == str(other)


def test_a_sweep_compares_server_flags_at_the_same_width_in_one_pass(
    swept: tuple[dict, list[str], Path],
) -> None:
    """The extra flags come after the bench's own, so they win: here no exactness probe."""
    _, _, root = swept
    extra = ("--exactness", "off")
    config = tiny_sweep(root, widths=(3,), warmup=0, compare_server_args=extra, interleave=True)
    record = run_sweep(config, lambda _: None)
    arms = record["arms"]
    assert [a["label"] for a in arms][1:4] == [
        "classic (--exactness off)",
        "width 3",
        "width 3 (--exactness off)",
    ]
    assert [a["served"]["exactness"] for a in arms[2:4]] == ["exact", "off"]
    assert arms[1]["width"] is None and arms[1]["verdict"] is None
    assert all(a["identical_to_classic"] for a in arms)
    assert record["setup"]["compare_server_args"] == list(extra)
