"""Prompts for training and evaluating the default drafter, drawn from text on every machine.

The sources are the Python standard library of the interpreter running this script
(its `.py` files give code; `pydoc_data/topics.py`, the language reference as strings,
plus long docstrings give prose) and, with `site=True`, every installed package: its
Python source, docstrings, Markdown/reST documents and package descriptions (a GPU
image with torch, transformers, jax, scipy and pandas holds hundreds of MB of them).
Nothing is copied into the repository; this module is the recipe. A deterministic part,
chosen by the hash of each source's relative path (stdlib paths bare, installed ones
under `site/`), is held out for evaluation, so every machine agrees on the split.

Three kinds of prompt:
- "code": a run of whole lines from a source file, continued raw; a quarter as many
  again are short (one to a few lines, as a function header is);
- "prose": a run of paragraphs from the reference topics or a docstring, continued raw,
  and short openings likewise;
- "chat": an instruction about a code or prose excerpt in the target's chat template.
  The training script adds chat turns whose user side the target writes itself, from
  one of `USER_OPENERS` (scripts/train_drafter.py: self_chat), and short prose
  openings it writes from one of `PROSE_OPENERS` (self_prose).

Stdlib only, so it runs wherever the training script runs.
"""

from __future__ import annotations

import ast
import hashlib
import random
import site
import sysconfig
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HELD_OUT_PERCENT = 10
SKIP_DIRS = {"site-packages", "dist-packages", "pydoc_data", "__pycache__", "idlelib", "turtledemo"}
MIN_DOCSTRING_CHARS = 300

CHAT_INSTRUCTIONS = {
    "code": [
        "Explain what this Python code does:\n\n```python\n{text}\n```",
        "Rewrite this Python code with comments:\n\n```python\n{text}\n```",
        "Write unit tests for this code:\n\n```python\n{text}\n```",
    ],
    "prose": [
        "Summarize this text:\n\n{text}",
        "Explain this to a beginner:\n\n{text}",
        "Write a short Python example that illustrates this:\n\n{text}",
    ],
}

# Short everyday prompts written for evaluation; no training prompt is drawn from them.
# (kind, text): "chat" texts are user turns rendered with the target's chat template.
SHORT_PROMPTS: tuple[tuple[str, str], ...] = (
    ("code", "def fibonacci(n):"),
    ("code", "def is_prime(n: int) -> bool:"),
    ("code", "class Stack:\n    def __init__(self):"),
    ("code", "def read_csv(path):\n    rows = []"),
    ("code", "import json\n\n\ndef load_config(path):"),
    ("code", 'class Point:\n    """A point in the plane."""\n'),
    ("code", "SELECT name, COUNT(*) FROM orders"),
    ("code", "-- Create a table of users\nCREATE TABLE users ("),
    ("prose", "Once upon a time, in a small village by the sea,"),
    ("prose", "The best way to learn a new programming language is"),
    ("prose", "Photosynthesis is the process by which"),
    ("prose", "The history of the printing press begins"),
    ("prose", "Q: What is the capital of France?\nA:"),
    ("prose", "Q: Why is the sky blue?\nA:"),
    ("chat", "What is the capital of France?"),
    ("chat", "Write a Python function that reverses a string."),
    ("chat", "Explain recursion to a beginner."),
    ("chat", "Give me three tips for writing clean code."),
    ("chat", "What is the difference between a list and a tuple in Python?"),
    ("chat", "Write a haiku about autumn."),
    ("chat", "How do I sort a dictionary by value in Python?"),
    ("chat", "Summarize the plot of Romeo and Juliet in two sentences."),
)


# How a user turn the target writes for itself begins (sampled on from there); "" lets
# it begin the turn itself.
USER_OPENERS: tuple[str, ...] = (
    "",
    "",
    "How do I",
    "How can I",
    "Write a",
    "Write a Python function",
    "What is",
    "What are",
    "What is the difference between",
    "Explain",
    "Can you",
    "Why does",
    "Why is",
    "Give me",
    "Tell me about",
    "Help me",
    "I need",
    "Create a",
    "Describe",
    "Compare",
    "List",
    "Summarize",
    "Is it",
    "Which",
    "Fix this",
    "Translate",
    "Suggest",
    "Write a short story about",
    "Write a poem about",
    "What happens when",
    "Show me",
    "In Python,",
    "In SQL,",
    "Please",
)

# Bare openings the target continues itself (sampled) into short prose prompts
# (scripts/train_drafter.py: self_prose): stories, how-tos, explanations, history, as
# everyday prose prompts are; the package documentation the other prose comes from is
# none of these. Single words and common starts, none an evaluation prompt's opening.
PROSE_OPENERS: tuple[str, ...] = (
    "The",
    "A",
    "In",
    "It",
    "When",
    "Many",
    "There",
    "One",
    "Today",
    "If",
    "Most",
    "Every",
    "This",
    "How",
    "Why",
    "Long ago,",
    "Scientists",
    "In the year",
    "My",
    "She",
    "He",
    "Learning",
    "To",
    "Water",
)


@dataclass(frozen=True)
class Prompt:
    text: str
    kind: str  # "code", "prose" or "chat"
    source: str  # relative path (or "topics/<key>") the text came from
    chat: bool = False
    history: tuple[str, ...] = ()  # chat: earlier turns, user and assistant alternating
    bare: bool = False  # chat: plain ChatML turns, without the template's system prompt


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def is_held_out(source: str) -> bool:
    """True for the evaluation part: ~HELD_OUT_PERCENT% of sources, by path hash."""
    return int.from_bytes(sha(source)[:4], "big") % 100 < HELD_OUT_PERCENT


def site_roots() -> list[Path]:
    """Where installed packages live (site-packages, dist-packages), deduplicated."""
    roots = [Path(p) for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]]
    return sorted({r.resolve() for r in roots if r.is_dir()})


def read_source(path: Path) -> str | None:
    """The text of a UTF-8 file under 2 MB with something in it, else None."""
    if not path.is_file() or path.stat().st_size > 2_000_000:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.strip() else None


def source_files(root: Path) -> list[tuple[str, str]]:
    """(relative path, text) of every readable stdlib .py file, sorted by path."""
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not SKIP_DIRS.intersection(rel.split("/")) and (text := read_source(path)):
            files.append((rel, text))
    return files


def topic_texts(root: Path) -> list[tuple[str, str]]:
    """(topics/<key>, text) of the language reference strings in pydoc_data/topics.py."""
    path = root / "pydoc_data" / "topics.py"
    if not path.is_file():
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            pairs = zip(node.value.keys, node.value.values, strict=True)
            return sorted(
                (f"topics/{k.value}", v.value)
                for k, v in pairs
                if isinstance(k, ast.Constant)
                and isinstance(k.value, str)
                and isinstance(v, ast.Constant)
                and isinstance(v.value, str)
            )
    return []


DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
STATEMENT_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")


def docstrings(rel: str, text: str) -> list[tuple[str, str]]:
    """(rel, docstring) of every long module, class and function docstring, in the order
    `ast.walk` visits them. Only statements are walked: docstrings live there, and a
    site-packages tree has millions of expression nodes."""
    try:
        queue = deque([ast.parse(text)])
    except (SyntaxError, ValueError):
        return []
    found = []
    while queue:
        node = queue.popleft()
        if isinstance(node, DOC_NODES):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= MIN_DOCSTRING_CHARS:
                found.append((rel, doc))
        for name in STATEMENT_FIELDS:
            queue.extend(getattr(node, name, ()))
    return found


def all_docstrings(sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """docstrings() of every source, in order, parsed on every core."""
    with ProcessPoolExecutor() as pool:
        found = pool.map(docstrings, *zip(*sources, strict=True), chunksize=64)
        return [d for docs in found for d in docs]


def line_window(text: str, rng: random.Random, min_chars: int, max_chars: int) -> str:
    """A run of whole lines from a random line on, up to a random limit; "" if too short."""
    lines = text.splitlines(keepends=True)
    for _ in range(10):
        start = rng.randrange(len(lines))
        limit = rng.randint(min_chars, max_chars)
        out: list[str] = []
        size = 0
        for line in lines[start:]:
            if size + len(line) > limit and out:
                break
            out.append(line)
            size += len(line)
        if size >= min_chars or start == 0:
            return "".join(out)
    return ""


def raw_prompts(
    sources: list[tuple[str, str]], kind: str, per_source: int, rng: random.Random
) -> list[Prompt]:
    prompts = []
    for rel, text in sources:
        count = max(1, min(per_source, len(text) // 2000))
        for _ in range(count):
            window = line_window(text, rng, 200, 1500)
            if window.strip():
                prompts.append(Prompt(window, kind, rel))
    return prompts


def short_prompts(
    sources: list[tuple[str, str]], kind: str, count: int, rng: random.Random
) -> list[Prompt]:
    """`count` openings of one to a few lines (20-200 characters), as everyday prompts
    are: a function header, a first sentence."""
    prompts = []
    for _ in range(count if sources else 0):
        rel, text = sources[rng.randrange(len(sources))]
        window = line_window(text, rng, 20, 200).rstrip()
        if len(window.strip()) >= 12:
            prompts.append(Prompt(window, kind, rel))
    return prompts


def chat_prompts(
    sources: list[tuple[str, str]], kind: str, count: int, rng: random.Random
) -> list[Prompt]:
    prompts = []
    for _ in range(count if sources else 0):
        rel, text = sources[rng.randrange(len(sources))]
        window = line_window(text, rng, 150, 900).strip()
        if window:
            instruction = rng.choice(CHAT_INSTRUCTIONS[kind]).format(text=window)
            prompts.append(Prompt(instruction, "chat", rel, chat=True))
    return prompts


def site_sources(
    max_code: int = 8000, max_prose: int = 3000
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(code, prose) sources of the installed packages, ids under `site/`. At most
    max_code / max_prose files, a sample fixed by path hash, so reading stays bounded."""
    code: list[tuple[str, Path, Path]] = []
    prose: list[tuple[str, Path, Path]] = []
    for n, root in enumerate(site_roots()):
        prefix = f"site/{n}/" if n else "site/"
        code += [(prefix, root, p) for p in root.rglob("*.py")]
        for pattern in ("*.md", "*.rst", "METADATA"):
            prose += [(prefix, root, p) for p in root.rglob(pattern)]

    def sample(paths: list[tuple[str, Path, Path]], limit: int) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for prefix, root, path in sorted(paths, key=lambda p: sha(str(p[2]))):
            rel = path.relative_to(root).as_posix()
            if len(out) < limit and "__pycache__" not in rel and (text := read_source(path)):
                out.append((prefix + rel, text))
        return sorted(out)

    return sample(code, max_code), sample(prose, max_prose)


def build_prompts(
    seed: int = 0,
    root: Path | None = None,
    code_per_file: int = 12,
    prose_per_source: int = 8,
    site: bool = False,
    max_site_code: int = 16000,
    max_site_prose: int = 6000,
) -> list[Prompt]:
    """Every prompt (train and held-out), in a deterministic order for a given seed."""
    root = root or stdlib_root()
    rng = random.Random(seed)
    code = source_files(root)
    prose = topic_texts(root) + all_docstrings(code)
    if site:
        site_code, site_prose = site_sources(max_site_code, max_site_prose)
        prose += site_prose + all_docstrings(site_code)
        code += site_code
    prompts = raw_prompts(code, "code", code_per_file, rng)
    prompts += raw_prompts(prose, "prose", prose_per_source, rng)
    n_chat = len(prompts) // 6
    prompts += chat_prompts(code, "code", n_chat // 2, rng)
    prompts += chat_prompts(prose, "prose", n_chat - n_chat // 2, rng)
    rng.shuffle(prompts)
    # Short openings last, from their own stream: the prompts above (and so the held-out
    # prompts every record names) stay what they were before these were added.
    short = random.Random(seed + 1)
    n_short = len(prompts) // 8
    openings = short_prompts(code, "code", n_short, short)
    openings += short_prompts(prose, "prose", n_short, short)
    short.shuffle(openings)
    return prompts + openings


def split(prompts: list[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(train, held_out) by the source's path hash."""
    train = [p for p in prompts if not is_held_out(p.source)]
    held_out = [p for p in prompts if is_held_out(p.source)]
    return train, held_out


def held_out_prompts(kind: str, count: int, seed: int = 0) -> list[str]:
    """`count` held-out prompt texts of one kind, for evaluation on any machine."""
    _, held_out = split(build_prompts(seed))
    return [p.text for p in held_out if p.kind == kind][:count]


HELD_OUT_FILE_ABOUT = (
    "Held-out prompts for draftwise bench --prompts-file: the first {n} held-out prompts of "
    "each kind (code, prose, chat) from the stdlib split of scripts/make_train_data.py "
    "(CPython {python}, seed 0), as the training script's own evaluation takes them; no "
    "training prompt is drawn from their sources. Written by `python "
    "scripts/make_train_data.py --held-out-file PATH --per-kind {n}`; "
    "tests/server/tooling/test_prompt_files.py keeps it equal to its source."
)


def held_out_file(per_kind: int, seed: int = 0) -> dict[str, object]:
    """The bench prompts file of `per_kind` held-out prompts per kind, kinds named."""
    import platform

    _, held_out = split(build_prompts(seed))
    by_kind = {kind: [p for p in held_out if p.kind == kind] for kind in ("code", "prose", "chat")}
    chosen = [p for prompts in by_kind.values() for p in prompts[:per_kind]]
    python = ".".join(platform.python_version_tuple()[:2])
    return {
        "about": HELD_OUT_FILE_ABOUT.format(n=per_kind, python=python),
        "kinds": [p.kind for p in chosen],
        "prompts": [p.text for p in chosen],
    }


if __name__ == "__main__":
    import json
    import sys

    if "--held-out-file" in sys.argv:
        path = Path(sys.argv[sys.argv.index("--held-out-file") + 1])
        per_kind = int(sys.argv[sys.argv.index("--per-kind") + 1])
        path.write_text(json.dumps(held_out_file(per_kind), indent=1) + "\n")
        sys.exit(0)
    all_prompts = build_prompts(site="--site" in sys.argv)
    train, held = split(all_prompts)
    for name, part in (("train", train), ("held_out", held)):
        kinds = {k: sum(p.kind == k for p in part) for k in ("code", "prose", "chat")}
        chars = sum(len(p.text) for p in part)
        print(f"{name}: {len(part)} prompts, {chars / 1e6:.1f} M chars, {kinds}")
