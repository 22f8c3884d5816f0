"""`--help` of every command reads at 80 and 120 columns: each option's full name, its value,
a description beside it, nothing cut short (issue 24).

The help is click's plain layout (cli/app.py sets rich_markup_mode=None), wrapped to the terminal
up to 100 columns. Example of what fails: a Rich table that prints `--lookup-ngram-m…`, or
the root's `--help <bool>`. No models.
"""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from specdec_cli.cli.app import app

runner = CliRunner()


def commands(group, path: tuple[str, ...] = ()):
    """Every command path with its click command, the group's own first. Example: ((), group), (('run',), run), ..."""
    yield path, group
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (Typer vendors its own click: no isinstance)
            yield from commands(command, path + (name,))
        else:
            yield path + (name,), command


ALL = list(commands(typer.main.get_command(app)))


def help_text(path: tuple[str, ...], columns: int) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_looked_at():
    names = {" ".join(path) for path, _ in ALL}
    assert {"", "run", "bench", "audit", "doctor", "serve", "simulate", "models", "models pull", "models check", "models list"} <= names


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("path, command", ALL, ids=[" ".join(p) or "specdec" for p, _ in ALL])
def test_help_shows_every_option_in_full_within_the_width(path, command, columns):
    text = help_text(path, columns)
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            for name in param.opts + param.secondary_opts:
                assert name in text, f"{name} missing from `specdec {' '.join(path)} --help` at {columns} columns:\n{text}"
    lines = text.splitlines()
    assert max(map(len, lines)) <= min(columns, 100), text
    assert "…" not in text and "<bool>" not in text, text
    assert "Usage: specdec" in lines[0]


@pytest.mark.parametrize("columns", [80, 120])
def test_the_command_list_gives_each_command_one_line(columns):
    text = help_text((), columns)
    listed = text.split("Commands:", 1)[1].strip().splitlines()
    assert [line.split()[0] for line in listed] == ["run", "bench", "doctor", "audit", "serve", "simulate", "models"], text
    assert not any(line.rstrip().endswith("...") for line in listed), text


def test_run_help_at_80_columns_puts_each_description_beside_its_option():
    text = help_text(("run",), 80)
    (line,) = [l for l in text.splitlines() if "--lookup-ngram-min" in l]
    assert line.split("--lookup-ngram-min", 1)[1].split(maxsplit=1)[1].startswith("Lookup: shortest n-gram"), line
