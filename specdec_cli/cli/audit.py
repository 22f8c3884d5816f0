"""`specdec audit`: check on your own pair and settings that speculative decoding is exact.

    specdec audit                                              # the built-in pair, run's defaults
    specdec audit --draft d.gguf --target t.gguf --temperature 1 --top-k 0 --top-p 1 --min-p 0
    specdec audit --samples 5000 --alpha 0.0001 --json "Write a haiku" > audit.json

The pair, prompt, drafter and draft length are loaded and built exactly as `specdec run`
builds them (cli.run.load_pair, session.LoadedPair.engine, policy.draft_policy); one policy
serves all draws, so `auto` learns across them as across the rounds of a long run.
Exit 0 consistent, 1 rejected (or inconclusive: nothing was drafted), 2 bad input.

Left out: the checks (audit/run.py), the statistics (audit/gof.py), the text (audit/render.py).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..errors import BadInput
from ..inputs import argv_text
from ..options import DEFAULT_VERIFY, check_p_min, parse_draft_length, parse_drafter
from .options import AUTO, ChatOption, ConstraintFlags, FilterFlags, LoadFlags, ModelFlags, PromptArgument, SystemOption, VerifyOption, check_common, flag_groups, read_prompt

if TYPE_CHECKING:
    from ..events import DraftTokens
    from ..session import LoadedPair

MAX_SAMPLES = 10_000_000
MIN_ALPHA = 1e-5  # a rejecting test simulates 20 / (alpha / 2) exact samplers (gof.simulated_test): 4 million here
MAX_GREEDY_TOKENS = 100_000


@flag_groups
def audit(
    prompt: PromptArgument = None,
    models: ModelFlags = ModelFlags(),
    samples: Annotated[int, typer.Option("--samples", "-N", help="Speculative generations drawn (their first two tokens are tested).")] = 2000,
    alpha: Annotated[float, typer.Option(help="False-alarm rate: the chance that an exact engine is rejected (split over the tests).")] = 0.001,
    greedy_tokens: Annotated[int, typer.Option(help="Tokens of the greedy identity check (speculative against target-only at temperature 0); 0 skips it.")] = 128,
    draft_tokens: Annotated[str, typer.Option("--draft-tokens", "-k", help="Draft tokens per round, as for run: 'auto' or a fixed k, e.g. 8.")] = AUTO,
    drafter: Annotated[str, typer.Option(help="Who drafts: model, lookup, model+lookup or cascade (as for run).")] = "model",
    p_min: Annotated[Optional[float], typer.Option(help="The draft model's early stop, as for run. Default 0: off.")] = None,
    temperature: Annotated[float, typer.Option(help="0 is greedy (then only the greedy check runs).")] = 0.8,
    verify: VerifyOption = DEFAULT_VERIFY,
    filters: FilterFlags = FilterFlags(),
    seed: Annotated[Optional[int], typer.Option(help="Seed of the first draw; draw i uses seed + i (default: a fresh one, reported).")] = None,
    constraints: ConstraintFlags = ConstraintFlags(),
    load: LoadFlags = LoadFlags(),
    chat: ChatOption = True,
    system: SystemOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object on stdout.")] = False,
) -> None:
    """Test that speculative decoding leaves the target's output law unchanged, on your pair and settings.

    Draws --samples speculative generations, tests their first token and first two tokens against the target's exact distribution (chi-square, total variation), and checks greedy output against target-only decoding. Exit 0 consistent, 1 rejected.

    Example: specdec audit --samples 2000 --raw "The history of the Roman Empire"
    """
    from ..audit.render import AuditDisplay, report_text
    from ..audit.run import AuditConfig, run_audit
    from ..tuning.policy import draft_policy
    from .render import Activity, stderr_console

    drafter = parse_drafter(drafter)
    k = parse_draft_length(draft_tokens)
    if not 1 <= samples <= MAX_SAMPLES:
        raise BadInput(f"--samples must be between 1 and {MAX_SAMPLES}, got {samples}")
    if not MIN_ALPHA <= alpha < 1:
        raise BadInput(f"--alpha must be at least {MIN_ALPHA:g} and below 1, e.g. 0.001; got {alpha}")
    if not 0 <= greedy_tokens <= MAX_GREEDY_TOKENS:
        raise BadInput(f"--greedy-tokens must be between 0 and {MAX_GREEDY_TOKENS}, got {greedy_tokens}")
    check_p_min(p_min)
    verify = check_common(temperature, 1, verify, filters, load, seed=seed, repeats=samples)
    seed = secrets.randbits(32) if seed is None else seed
    constraint = constraints.read()
    text = read_prompt(prompt)
    if system is not None:
        system = argv_text(system, "--system")
    from .run import load_pair

    config = AuditConfig(samples=samples, alpha=alpha, sampling=filters.sampling(temperature), seed=seed, greedy_tokens=greedy_tokens, verify=verify, grammar=constraint)
    console = stderr_console(False)
    options = load.options(models.pair_name, chat=chat)
    with contextlib.ExitStack() as stack:
        pair = load_pair(stack, models, options, Activity(console), need_draft=drafter != "lookup")
        prompt_ids = pair.prompt_tokens(text, chat=chat, system=system)
        with AuditDisplay(console, greedy_tokens) as display:
            policy = draft_policy(k, p_min)
            result = run_audit(pair.engine(drafter=drafter), pair.engine(speculative=False), prompt_ids, config, policy, display)
        describe = describe_pair(pair, drafter, k, verify)
    typer.echo(json.dumps(result.to_dict() | {"pair": describe}) if json_out else report_text(result, describe))
    if result.verdict != "consistent":
        raise typer.Exit(1)


def describe_pair(pair: LoadedPair, drafter: str, k: DraftTokens, verify: str = DEFAULT_VERIFY) -> str:
    """Example: 'draft a.gguf -> target b.gguf, drafter model, k auto, verify token'."""
    draft = f"draft {pair.draft.path.name} -> " if pair.draft is not None and drafter != "lookup" else ""
    return f"{draft}target {pair.target.path.name}, drafter {drafter}, k {k}, verify {verify}"
