"""The bench's prompt suite: built-in prompts that span what changes acceptance, or the user's own.

How often a draft agrees with its target depends on the text being written: code and lists
are predictable, summaries copy from the prompt, free stories wander. The built-in suite
has one prompt of each kind (code, chat, summarising a text given in the prompt, a
structured list, story writing), each with a short name for tables, and two where the
answer repeats the prompt or switches register: "edit" quotes a paragraph (with three
misspellings) and asks for it back corrected, which is where prompt-lookup drafting should
shine; "mixed" asks for prose, code and prose again about a function quoted in the prompt.

`load_prompts(path)` reads the user's own: a JSONL file (one object per line with a
"prompt" key and an optional "name") or plain text with one prompt per line.

    load_prompts(Path("mine.jsonl"))   # {"name": "sql", "prompt": "Write a SQL query ..."}
    -> [Prompt(name="sql", kind="user", text="Write a SQL query ...")]

Left out: chat templates and tokenization (session.py), running anything (bench/run.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput
from .inputs import read_text_file


@dataclass(frozen=True)
class Prompt:
    name: str  # short, unique within a suite: it labels table rows and CSV lines
    kind: str  # what kind of text it asks for ("code", "chat", ..., or "user")
    text: str


_SUMMARY_TEXT = (
    "The town of Marrow Bay built its first lighthouse in 1821, after a winter storm drove three "
    "fishing boats onto the rocks below the harbour. The first tower was made of timber and burned "
    "whale oil, and its keeper, a retired sailor named Edith Crane, climbed its ninety steps every "
    "four hours to trim the wicks. In 1867 the timber tower was replaced by a stone one with a "
    "rotating lens that could be seen twenty miles out to sea. The light was electrified in 1931 "
    "and fully automated in 1989, when the last keeper retired. Today the tower is a small museum, "
    "and volunteers still polish its brass fittings every spring."
)

# The summary text with three misspellings (thre, bye, voluntears), to correct.
_EDIT_TEXT = (
    _SUMMARY_TEXT.replace("drove three", "drove thre")
    .replace("replaced by", "replaced bye")
    .replace("volunteers still", "voluntears still")
)

_MIXED_CODE = (
    "def top_words(text, n):\n"
    "    counts = {}\n"
    "    for word in text.lower().split():\n"
    "        word = word.strip('.,;:!?')\n"
    "        if word:\n"
    "            counts[word] = counts.get(word, 0) + 1\n"
    "    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))\n"
    "    return [word for word, _ in ranked[:n]]\n"
)

BUILTIN_PROMPTS: tuple[Prompt, ...] = (
    Prompt(
        "code",
        "code",
        "Write a Python function merge_intervals(intervals) that merges overlapping intervals, "
        "given as a list of (start, end) tuples, and returns them sorted. Include a docstring and "
        "a short usage example.",
    ),
    Prompt(
        "chat",
        "chat",
        "I keep putting off replying to emails. What are some practical ways to stop "
        "procrastinating on them?",
    ),
    Prompt("summary", "summarise", "Summarise the following text in two sentences.\n\n" + _SUMMARY_TEXT),
    Prompt(
        "list",
        "structured",
        "List the planets of the solar system in order from the Sun. For each one give its name, "
        "whether it is rocky or a giant, and one notable fact, as a Markdown table.",
    ),
    Prompt("story", "story", "Write a short story about a robot who learns to paint."),
    Prompt(
        "edit",
        "edit",
        "Correct the spelling mistakes in the following paragraph and return the whole paragraph, "
        "otherwise unchanged.\n\n" + _EDIT_TEXT,
    ),
    Prompt(
        "mixed",
        "mixed",
        "Here is a Python function:\n\n" + _MIXED_CODE + "\n"
        "Explain in a short paragraph what it does, then rewrite it with type hints and a docstring, "
        "and finish with one sentence on when it returns an empty list.",
    ),
)


def builtin_prompts() -> list[Prompt]:
    return list(BUILTIN_PROMPTS)


def load_prompts(path: Path) -> list[Prompt]:
    """The prompts in a JSONL file (objects with "prompt", optional "name") or one prompt per line.

    The file is read as JSONL when its name ends in .jsonl or its first non-blank line starts
    with "{"; then every non-blank line must be such an object.
    """
    text = read_text_file(path, "prompt file")  # never opens a FIFO; UTF-8 only
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise BadInput(f"the prompt file {path} holds no prompts; write one prompt per line, or JSONL with a \"prompt\" key")
    jsonl = path.suffix == ".jsonl" or lines[0][1].lstrip().startswith("{")
    prompts = [_from_json(path, n, line) if jsonl else Prompt(f"p{i}", "user", line.strip()) for i, (n, line) in enumerate(lines, 1)]
    if jsonl:
        prompts = [p if p.name else Prompt(f"p{i}", p.kind, p.text) for i, p in enumerate(prompts, 1)]
    names = [p.name for p in prompts]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise BadInput(f"{path}: the name {duplicate!r} labels more than one prompt; give each prompt its own \"name\"")
    return prompts


def _from_json(path: Path, line_no: int, line: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}, line {line_no}: not valid JSON ({exc.msg}); JSONL needs one object per line") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
        raise BadInput(f'{path}, line {line_no}: expected an object with a non-empty "prompt" string, e.g. {{"prompt": "Write a haiku"}}')
    name = obj.get("name")
    return Prompt(str(name) if name else "", str(obj.get("kind") or "user"), obj["prompt"])
