"""`agentloop eval`: run a dataset of cases on a bot, print the report, write it as JSON and HTML,
and fail on regressions against a baseline (the `evals` extra)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from agentloop.adapters import open_stores
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.bots import ModelSettings, built_pipeline, check_models, open_bot
from agentloop.cli._options import EXIT_STATUS, MODEL_EPILOG, Commands, CliError, SharedOptions, model_settings, otel_from_environment, seconds
from agentloop.ports.llm import LLM

def register(commands: Commands, options: SharedOptions) -> None:
    """The `eval` command."""
    command = commands.add_parser(
        "eval", parents=[options.model, options.otel], help="run a dataset of cases on a bot and report what passed",
        description="Run every case of DATASET (YAML, JSON or JSONL) on a fresh session of the bot, each in a tenant "
        "chain of its own, and check its expectations: the answer, structured output, tools called, finish reason, "
        "budget, and criteria an LLM judge decides. Prints a table per case and per check with tokens, cost and "
        "latency; writes JSON and HTML reports; with --baseline, a case or check that passes less often than in the "
        "baseline is a regression (exit status 1).",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    command.add_argument("dataset", nargs="?", metavar="DATASET", help="the dataset file (see --schema)")
    command.add_argument("--schema", action="store_true", help="print the JSON schema of a dataset file and exit")
    command.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="the bot: a factory taking llm, channel and stores by name, or nothing (default: the standard bot with note-taking)",
    )
    command.add_argument(
        "--stores", metavar="URL", help="the bot's stores (default: a fresh temporary directory, removed afterwards)",
    )
    command.add_argument("--bot", default="bot", help="the bot's name in its stores (default: bot)")
    command.add_argument("--judge-model", metavar="NAME", help="the model judging criteria, on the same endpoint (default: --model)")
    command.add_argument("--concurrency", type=_positive, default=4, metavar="N", help="cases run at once (default: 4)")
    command.add_argument("--repeat", type=_positive, default=1, metavar="N", help="runs of each case, for pass rates (default: 1)")
    command.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS", help="the turn deadline (default: 120)")
    command.add_argument("--json", metavar="FILE", help="write the report as JSON (a later run's --baseline)")
    command.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML file")
    command.add_argument("--baseline", metavar="FILE", help="a JSON report of an earlier run: fewer passes now is a regression")
    command.add_argument(
        "--fail-under", type=float, default=0.0, metavar="RATE",
        help="exit status 1 when the pass rate is below RATE, 0 to 1 (default: 0, failing cases alone do not fail the command)",
    )
    command.add_argument("--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)")
    learning = command.add_argument_group("the learning curve")
    learning.add_argument(
        "--learning", action="store_true",
        help="DATASET is a learning dataset: run its task families' sessions in order with note-taking and without, "
        "on fresh stores each, and report both curves (needs --pipeline, a bot with note-taking)",
    )
    learning.add_argument("--out", default="learning-report", metavar="DIR", help="where learning.json, .png and .html go")
    learning.add_argument("--price", action="append", default=[], metavar="MODEL=INPUT,OUTPUT",
                          help="a model's dollars per million input and output tokens, when the price table lacks it")
    command.set_defaults(handler=_eval)


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return number


def _evals() -> Any:
    try:
        import agentloop.evals as evals
    except ImportError as error:
        raise CliError(f"evaluations need pydantic-evals: pip install 'agentloop-ecs[evals]' ({error})") from error
    return evals


def _eval(args: argparse.Namespace, out: TextIO) -> int:
    evals = _evals()
    if args.schema:
        out.write(json.dumps(evals.dataset_schema(), indent=2) + "\n")
        return 0
    if args.dataset is None:
        raise CliError("give the DATASET to evaluate (or --schema for the format of one)")
    if args.learning:
        return _learning(args, out)
    dataset = evals.load_dataset(args.dataset)
    baseline = None if args.baseline is None else evals.read_report(args.baseline)
    settings = model_settings(args)
    model = functools.cache(settings.llm)
    judge = _judge(settings, args.judge_model, model) if any(case.expect.judge for case in dataset.cases) else None
    with ExitStack() as stack:
        stack.enter_context(otel_from_environment(args.otel, "agentloop-eval"))
        where = args.stores or stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-eval-"))
        if args.pipeline is None:
            bot = stack.enter_context(open_bot(where, model(), RecordingChannel(), bot=args.bot))
            loop, stores = bot.loop, bot.pipeline.stores
        else:
            stores = stack.enter_context(open_stores(where, bot=args.bot))
            offered: dict[str, Callable[[], Any]] = {"llm": model, "channel": RecordingChannel, "stores": lambda: stores}
            loop = stack.enter_context(built_pipeline(args.pipeline, offered))
        check_models(loop)
        loop.turn_timeout = args.timeout
        progress = out.isatty() and not args.no_progress
        evaluation = asyncio.run(evals.evaluate_dataset(
            dataset, loop, stores=stores, judge=judge() if judge else None, concurrency=args.concurrency,
            repeat=args.repeat, progress=progress, model=settings.model,
        ))
    return _report(evals, evaluation, baseline, args, out)


def _learning(args: argparse.Namespace, out: TextIO) -> int:
    """`--learning`: the learning curve of the bot `--pipeline` builds, offered the model the options name."""
    from agentloop.evals import learning

    if args.pipeline is None:
        raise CliError("--learning needs --pipeline MODULE:FACTORY, a bot with note-taking")
    args.price = [learning.parse_price(given) for given in args.price]
    return learning.learning_command(args, out, sys.stderr)


def _judge(settings: ModelSettings, name: str | None, model: Callable[[], LLM]) -> Callable[[], LLM]:
    """The judge: the bot's own model unless `--judge-model` names another of the endpoint."""
    if name is None or name == settings.model:
        return model
    return functools.cache(ModelSettings(name, provider=settings.provider, base_url=settings.base_url).llm)


def _report(evals: Any, evaluation: Any, baseline: Any, args: argparse.Namespace, out: TextIO) -> int:
    report = evaluation.report
    found = [] if baseline is None else evals.regressions(report, baseline)
    out.write(evaluation.table() + "\n" + evals.summary_table(report, found))
    if args.json:
        report.write(args.json)
        out.write(f"JSON report: {args.json}\n")
    if args.html:
        Path(args.html).write_text(evals.render_html(report, found), encoding="utf-8")
        out.write(f"HTML report: {args.html}\n")
    if found:
        listed = "; ".join(str(regression) for regression in found)
        raise CliError(f"{len(found)} regression{'s' if len(found) > 1 else ''} against {args.baseline}: {listed}")
    if report.pass_rate < args.fail_under:
        raise CliError(f"the pass rate {report.pass_rate:.0%} is below --fail-under {args.fail_under:.0%}")
    return 0
