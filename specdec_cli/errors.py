"""The errors specdec raises, and the exit code each one maps to.

Everything a user can get wrong (a path, an option, a pair of models that do not fit
together) raises a `SpecdecError` subclass whose message already says what to do, e.g.
"prompt is 3100 tokens but the context holds 2048; pass --ctx 4096". Only cli/app.py (the
app's group class, `_Group.invoke`, for every command; `main` for parse-time errors) turns
these into one stderr line and an exit code; nothing here prints.

Exit codes: 1 runtime failure, 2 bad usage or bad input, 3 incompatible pair (from
`specdec models check` only; elsewhere an incompatible pair is bad input), 130 interrupted.
"""

from __future__ import annotations


class SpecdecError(Exception):
    """Base class: a failure specdec explains in one line."""

    exit_code = 1


class BadInput(SpecdecError):
    """The user's input (options, prompt, config file) cannot be used as given."""

    exit_code = 2


class ModelNotFound(BadInput):
    """A model path, pair name or Hugging Face file that does not exist."""


class ModelLoadError(BadInput):
    """A file that exists but llama.cpp cannot load (not GGUF, truncated, unsupported)."""


class IncompatiblePair(BadInput):
    """Draft and target do not share a vocabulary, so draft tokens mean nothing to the target."""


class ContextOverflow(BadInput):
    """The prompt (plus what must be generated) does not fit in the context window."""


def check_context(n_ctx: int, needed: int) -> None:
    """ContextOverflow when a model's cache would need more than its n_ctx tokens. Example:
    (8, 9) -> "the context holds 8 tokens but 9 are needed; pass a larger --ctx"."""
    if needed > n_ctx:
        raise ContextOverflow(f"the context holds {n_ctx} tokens but {needed} are needed; pass a larger --ctx")


class BadConfig(BadInput):
    """A models.toml (shipped or the user's) that does not follow the schema."""


class DownloadError(SpecdecError):
    """A Hugging Face download that failed for a reason other than a missing file."""


class NumericalError(SpecdecError):
    """A model produced NaN or infinite logits, so no distribution can be formed."""


class GrammarError(BadInput):
    """A constraint (JSON schema, grammar, tool list) that cannot be compiled, or that a generation
    cannot continue under; the message is llguidance's reason, after what was refused."""
