"""The flags run, serve, bench and audit share are declared once (cli/options.py's flag groups)
and read the same in each command: the same help, the same default, the same check.

Examples of what fails: serve re-declaring --top-k inline with other wording; bench dropping
--rpc; `flag_groups` listing a group's flags out of place (that moves them in --help) or
handing the command the wrong values; audit checking --ctx differently from run. No models.
"""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from specdec_cli.cli.app import app
from specdec_cli.cli.options import ConstraintFlags, FilterFlags, LoadFlags, ModelFlags, check_common, flag_groups
from specdec_cli.options import BadSetting

runner = CliRunner()
COMMANDS = ("run", "serve", "bench", "audit")
GROUPS_TAKEN = {ModelFlags: COMMANDS, FilterFlags: COMMANDS, LoadFlags: COMMANDS, ConstraintFlags: ("run", "bench", "audit")}
# Flags a command words its own way on purpose: bench sweeps lists (-k 1,2,4), audit's say "as for run".
EVERY = frozenset(COMMANDS)
OWN_WORDING = {
    "--max-tokens": EVERY, "-n": EVERY, "--seed": EVERY, "--json": EVERY,
    "--draft-tokens": {"bench", "audit"}, "-k": {"bench", "audit"}, "--drafter": {"bench", "audit"},
    "--temperature": {"bench", "audit"}, "--p-min": {"audit"}, "--raw": {"bench"},
}  # fmt: skip


def options_of(command_name: str) -> dict[str, tuple]:
    """Each flag name of a command -> what its --help line is made of (help, default, metavar, all its names)."""
    command = typer.main.get_command(app).commands[command_name]
    out = {}
    for param in command.params:
        if param.param_type_name == "option":
            for name in param.opts + param.secondary_opts:
                out[name] = (param.help, param.default, param.metavar, tuple(param.opts), tuple(param.secondary_opts))
    return out


def test_a_flag_two_commands_take_reads_the_same_in_both():
    options = {name: options_of(name) for name in COMMANDS}
    flags = {flag for taken in options.values() for flag in taken}
    checked = 0
    for flag in sorted(flags):
        same_wording = [name for name in COMMANDS if flag in options[name] and name not in OWN_WORDING.get(flag, ())]
        readings = {name: options[name][flag] for name in same_wording}
        assert len(set(readings.values())) <= 1, f"{flag} reads differently in {', '.join(same_wording)}: {readings}"
        checked += len(same_wording) > 1
    assert checked >= 20  # --draft ... --draft-rpc, --verify, -k in run and serve, ...


def test_each_command_takes_every_flag_of_its_groups():
    for group, commands in GROUPS_TAKEN.items():
        for name in commands:
            taken = {param.name for param in typer.main.get_command(app).commands[name].params}
            missing = [field for field in group.__dataclass_fields__ if field not in taken]
            assert not missing, f"specdec {name} lacks {missing} of {group.__name__}"


def test_flag_groups_put_the_group_flags_in_its_place_and_hand_the_command_the_group():
    seen = {}

    @flag_groups
    def command(
        first: Annotated[int, typer.Option(help="Before the group.")] = 1,
        load: LoadFlags = LoadFlags(),
        last: Annotated[bool, typer.Option(help="After the group.")] = False,
    ) -> None:
        seen.update(first=first, load=load, last=last)

    one = typer.Typer(add_completion=False)
    one.command()(command)
    names = [param.name for param in typer.main.get_command(one).params]
    assert names == ["first", "ctx", "draft_ctx", "threads", "gpu_layers", "draft_gpu_layers", "repack", "rpc", "draft_rpc", "last"]
    result = runner.invoke(one, ["--ctx", "64", "--no-repack", "--first", "3", "--last"])
    assert result.exit_code == 0, result.output
    assert seen == {"first": 3, "load": LoadFlags(ctx=64, repack=False), "last": True}
    runner.invoke(one, [])
    assert seen["load"] == LoadFlags() and seen["first"] == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ctx", "0"], "--ctx must be at least 1 token, got 0"),
        (["--draft-gpu-layers", "-2"], "--draft-gpu-layers must be -1 (all) or between 0 and 2147483647, got -2"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
        (["--min-p", "1"], "--min-p must be in [0, 1), got 1.0"),
        (["--verify", "tree"], "--verify must be one of token, block, auto, got 'tree'"),
    ],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_shared_flag_in_the_same_line_before_loading(command, args, message, monkeypatch):
    from specdec_cli import session
    from specdec_cli.cli import serve

    def refuse(*args, **kwargs):
        raise AssertionError("reached a model load or the server before the bad flag was refused")

    monkeypatch.setattr(session, "open_pair", refuse)
    monkeypatch.setattr(serve, "run_server", refuse)
    prompt = ["hello"] if command in ("run", "audit") else []
    result = runner.invoke(app, [command, *args, *prompt])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"specdec: error: {message}"] and result.stdout == ""


def test_check_common_returns_the_rule_and_names_the_flag_of_a_bad_value():
    assert check_common(0.8, 256, "Block", FilterFlags(), LoadFlags()) == "block"
    with pytest.raises(BadSetting, match=r"^--seed must be between 0 and 18446744073709551613, got 18446744073709551614$"):
        check_common(0.8, 256, "token", FilterFlags(), LoadFlags(), seed=2**64 - 2, repeats=3)  # the third repeat's seed overflows
    with pytest.raises(BadSetting, match=r"^--threads must be at least 1, got 0$"):
        check_common(0.8, 256, "token", FilterFlags(), LoadFlags(threads=0))
