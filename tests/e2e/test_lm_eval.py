"""lm-eval 0.4.13 against the real server.

`local-completions` scores a local multiple-choice task with nothing but the base URL
(and the key): the server's `/tokenizer_info`, `/tokenize` and `/detokenize` stand in
for a tokenizer argument. Under `apply_chat_template` it needs the model's tokenizer
directory: 0.4.13's remote-tokenizer path hands the chat history on as a list and fails
in its own `_encode_pair` before any request is sent (a client bug; see
docs/http-api.md). Either way, every loglikelihood it reports must be the engine's own
score of the same tokens. `local-chat-completions` runs a small generate task; its
answers must be what the openai SDK gets for the same messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import lm_eval
import openai
import pytest
from mlx_lm import load

from drafter.engine import Engine
from tests.e2e.conftest import API_KEY
from tests.e2e.serverproc import ServerProcess

QUESTIONS: list[dict[str, Any]] = [
    {"question": "Which is a colour?", "choices": ["red", "seven", "walk"], "answer": 0},
    {"question": "Which is a number?", "choices": ["blue", "three"], "answer": 1},
    {"question": "What do cats say?", "choices": ["meow", "moo", "quack"], "answer": 0},
    {"question": "Which is a fruit?", "choices": ["chair", "apple"], "answer": 1},
]

MC_TASK = """\
task: draftwise_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""

GEN_TASK = """\
task: draftwise_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{choices[answer]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lm-eval-tasks")
    data = root / "questions.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (root / "mc.yaml").write_text(MC_TASK.format(data=data))
    (root / "gen.yaml").write_text(GEN_TASK.format(data=data))
    return root


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No hub, a private datasets cache, and the server's key for lm-eval's requests."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)


def evaluate(
    tasks: Path,
    task: str,
    model: str,
    base_url: str,
    model_id: str,
    chat: bool = True,
    tokenizer: Path | None = None,
) -> dict[str, Any]:
    from lm_eval.tasks import TaskManager

    # Without a tokenizer argument lm-eval finds the server's own. The key guards the
    # tokenizer endpoints as it guards /v1 (OPENAI_API_KEY carries it to /v1).
    args = f"base_url={base_url},model={model_id},auth_token={API_KEY}"
    if tokenizer is not None:
        args += f",tokenizer={tokenizer},tokenizer_backend=huggingface"
    return lm_eval.simple_evaluate(
        model=model,
        model_args=args + ",num_concurrent=1,max_retries=1",
        tasks=[task],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        apply_chat_template=chat,
        log_samples=True,
    )


def engine_loglikelihood(
    engine: Engine, http: httpx.Client, context: str, continuation: str
) -> float:
    """The engine's score of the tokens lm-eval sends for (context, continuation): its
    rule (trailing spaces move to the continuation, the whole text is encoded and split
    at the context's length), through the server's own /tokenize."""

    def encode(text: str) -> list[int]:
        body = {"prompt": text, "add_special_tokens": False}
        return http.post("/tokenize", json=body).json()["tokens"]

    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, head = encode(context + continuation), encode(context)
    scored = engine.score(whole, 1)
    return sum(token.logprob for token in scored[len(head) :] if token is not None)


@pytest.mark.parametrize(
    "chat", [False, True], ids=["base-url-only", "chat-template-with-tokenizer-dir"]
)
def test_local_completions_scores_a_multiple_choice_task_as_the_engine_does(
    server: ServerProcess,
    http: httpx.Client,
    model_id: str,
    tiny_model: Path,
    tasks: Path,
    offline: None,
    chat: bool,
) -> None:
    url = f"{server.base_url}/v1/completions"
    tokenizer = tiny_model if chat else None
    results = evaluate(tasks, "draftwise_mc", "local-completions", url, model_id, chat, tokenizer)
    samples = results["samples"]["draftwise_mc"]
    assert len(samples) == len(QUESTIONS)
    model, tokenizer = load(str(tiny_model))  # the served model, loaded here
    engine = Engine(model, tokenizer, model_id=model_id, context_length=2048)
    scored = 0
    for sample in samples:
        assert ("<|im_start|>" in sample["arguments"][0][0]) == chat
        for (context, continuation), (loglikelihood, _) in zip(
            sample["arguments"], [r[0] for r in sample["resps"]], strict=True
        ):
            expected = engine_loglikelihood(engine, http, context, continuation)
            assert loglikelihood == pytest.approx(expected, abs=1e-3)
            assert loglikelihood < 0
            scored += 1
    assert scored == sum(len(q["choices"]) for q in QUESTIONS)
    assert 0.0 <= results["results"]["draftwise_mc"]["acc,none"] <= 1.0


def test_local_chat_completions_answers_as_the_openai_sdk_does(
    server: ServerProcess, client: openai.OpenAI, model_id: str, tasks: Path, offline: None
) -> None:
    results = evaluate(
        tasks,
        "draftwise_gen",
        "local-chat-completions",
        f"{server.base_url}/v1/chat/completions",
        model_id,
    )
    samples = results["samples"]["draftwise_gen"]
    assert len(samples) == len(QUESTIONS)
    for sample in samples:
        answer = sample["resps"][0][0]
        question = sample["doc"]["question"]
        reply = client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": question}],
            max_tokens=8,
            temperature=0.0,
            stop=["\n"],
        )
        assert answer == reply.choices[0].message.content
    assert "exact_match,none" in results["results"]["draftwise_gen"]
