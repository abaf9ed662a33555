"""What the command groups share: the error a command explains in one line, the option groups
several commands take, and the typed settings the composition root is given from them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

import attrs

from agentloop.bots import DEFAULT_BASE_URL, BotSettings, ModelSettings, start_otel
from agentloop.errors import AgentloopError
from agentloop.budgets import Budgets
from agentloop.mid_turn import MidTurnPolicy
from agentloop.scopes import DEFAULT_COMPANY

DEFAULT_DATA_DIR = "agentloop-data"
DEFAULT_MODEL = "llama3.1"
EXIT_STATUS = "exit status: 0 success; 1 an error, explained in one line on stderr; 2 a usage error."

MODEL_EPILOG = (
    "The API key is read from $AGENTLOOP_API_KEY, else $OPENAI_API_KEY ($ANTHROPIC_API_KEY for anthropic; "
    "none is sent if both are unset). "
    "Before the first turn one GET of the endpoint's model list reports, in one line, an endpoint that does not answer, "
    "an API key it refuses (401/403), a base URL without its API path (404) or a model it does not list."
)

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The `add_subparsers` object a command group adds its parser to."""


class CliError(AgentloopError):
    """A problem the user can fix; printed as one line, exit status 1."""


@attrs.frozen
class SharedOptions:
    """The option groups several commands take, as argparse parents: where the bot is, the
    tenant chain, the model, and OpenTelemetry."""

    data: argparse.ArgumentParser = attrs.Factory(lambda: _data_options())
    chain: argparse.ArgumentParser = attrs.Factory(lambda: _chain_options())
    model: argparse.ArgumentParser = attrs.Factory(lambda: _model_options())
    otel: argparse.ArgumentParser = attrs.Factory(lambda: _otel_options())


def bot_settings(args: argparse.Namespace) -> BotSettings:
    """The bot `--stores URL` (else the SQLite data directory `--data-dir`) and `--bot` name."""
    return BotSettings(str(args.stores if args.stores is not None else args.data_dir), args.bot)


def model_settings(args: argparse.Namespace) -> ModelSettings:
    """The model `--model`, `--provider` and `--base-url` name, and its `--fallback-model`s."""
    return ModelSettings(args.model, provider=args.provider, base_url=args.base_url, fallbacks=tuple(args.fallback_model))


def _data_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    where = options.add_mutually_exclusive_group()
    where.add_argument(
        "--stores", metavar="URL",
        help="the URL of the bot's stores: sqlite:///DIR (relative DIR; sqlite:////abs/dir), or a directory path",
    )
    where.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
        help=f"short for --stores sqlite:///DIR: where the bot's SQLite databases and indexes live (default: ./{DEFAULT_DATA_DIR})",
    )
    options.add_argument("--bot", default="bot", help="the bot's name; its files are DIR/NAME.* (default: bot)")
    return options


def _chain_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--company", help=f"the caller's company id (default: {DEFAULT_COMPANY})")
    for layer in ("org", "team", "project"):
        options.add_argument(f"--{layer}", help=f"the caller's {layer} id")
    return options


def _model_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--provider", choices=("openai", "anthropic"), default="openai",
        help="the API the endpoint speaks: openai (chat completions, the default) or anthropic (the Messages API)",
    )
    options.add_argument(
        "--base-url", metavar="URL",
        help=f"the endpoint (default for openai: $AGENTLOOP_BASE_URL or {DEFAULT_BASE_URL}, Ollama's; for anthropic: Anthropic's API)",
    )
    options.add_argument(
        "--model", default=os.environ.get("AGENTLOOP_MODEL", DEFAULT_MODEL),
        help=f"the model name the endpoint serves (default: $AGENTLOOP_MODEL or {DEFAULT_MODEL})",
    )
    options.add_argument(
        "--fallback-model", action="append", default=[], metavar="NAME",
        help="a model of the same endpoint to ask when the one before it fails as an outage does (unreachable, 5xx, "
        "429 after retries, an unknown model); repeat it for more, in order",
    )
    return options


def _otel_options() -> argparse.ArgumentParser:
    """`--otel`, for the commands that run turns."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--otel", action="store_true",
        help="report spans and metrics through OpenTelemetry, exporters chosen by the standard OTEL_* variables "
        "(OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, ...); needs the otel extra",
    )
    return options


@contextmanager
def otel_from_environment(enabled: bool, service_name: str) -> Iterator[None]:
    """With `--otel` (`enabled`): OpenTelemetry on for the block, flushed when it ends."""
    if not enabled:
        yield
        return
    shutdown = start_otel(service_name)
    try:
        yield
    finally:
        shutdown()


def seconds(text: str) -> float:
    """A positive number of seconds, for argparse."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def add_budgets(parser: argparse.ArgumentParser) -> None:
    """The `--budget NAME=AMOUNT` option, given once per limit."""
    parser.add_argument(
        "--budget", action="append", default=[], metavar="NAME=AMOUNT",
        help="a limit, once per limit: turn-tokens=N, or SCOPE-PERIOD-KIND=AMOUNT with SCOPE session or tenant, "
        "PERIOD daily or monthly, KIND tokens or cost in US dollars (tenant-daily-cost=5.00); a turn that would "
        "pass one ends with finish reason budget_exceeded",
    )


def budgets_of(args: argparse.Namespace) -> Budgets:
    """The `--budget` options as `Budgets`; a value that does not read is a `BudgetSpecError`."""
    return Budgets.parse(args.budget)


def add_mid_turn(parser: argparse.ArgumentParser) -> None:
    """The `--mid-turn` option: what a message gets while a turn of its session runs."""
    parser.add_argument(
        "--mid-turn", choices=[policy.value for policy in MidTurnPolicy], default=MidTurnPolicy.QUEUE.value,
        help="a message arriving while a turn of its session runs: queue it behind the turn, reject it "
        "(HTTP 409), or interrupt the turn at its next safe point and answer the new message (default: queue)",
    )
