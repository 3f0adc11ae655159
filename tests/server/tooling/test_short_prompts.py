"""server/tooling/short_prompts.json is derived from scripts/make_train_data.py's
SHORT_PROMPTS (the training script evaluates the drafter on them, the bench serves them):
the two must not drift apart."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from server.tooling.bench import SHORT_PROMPTS_FILE, _prompts_file

ROOT = Path(__file__).resolve().parents[3]


def make_train_data() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_train_data", ROOT / "scripts" / "make_train_data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_short_prompts_file_serves_short_prompts_in_order_chat_as_chatml() -> None:
    source = make_train_data().SHORT_PROMPTS
    served = json.loads(SHORT_PROMPTS_FILE.read_text())
    assert served["kinds"] == [kind for kind, _ in source]
    expected = [
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n" if kind == "chat" else text
        for kind, text in source
    ]
    assert served["prompts"] == expected


def test_the_bench_reads_the_short_prompts_file() -> None:
    prompts = _prompts_file(str(SHORT_PROMPTS_FILE))
    assert len(prompts) == len(make_train_data().SHORT_PROMPTS) == 22
