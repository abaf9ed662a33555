"""`agentloop templates validate`: load task templates as `tasks run` would, registering nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from agentloop.cli._options import EXIT_STATUS, Commands, CliError, SharedOptions
from agentloop.tasks import validate_path
from agentloop.terminal import terminal_text


def register(commands: Commands, options: SharedOptions) -> None:
    """The `templates` command group: `validate`."""
    templates = commands.add_parser("templates", help="check task templates", epilog=EXIT_STATUS)
    templates_commands = templates.add_subparsers(dest="templates_command", required=True, metavar="ACTION")
    validate = templates_commands.add_parser(
        "validate", help="check a template file or every *.xml under a directory",
        description="Load each template as `tasks run` would, registering nothing: errors and warnings "
        "are printed with file and line.",
        epilog="exit status: 0 every template loads (warnings are printed but allowed); 1 an error was found; 2 a usage error.",
    )
    validate.add_argument("path", metavar="PATH", help="a template file or a directory")
    validate.set_defaults(handler=_templates_validate)


def _templates_validate(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.path)
    if not path.exists():
        raise CliError(f"{path} does not exist; give a template file or a directory of *.xml files")
    report = validate_path(path)
    if not report.files:
        raise CliError(f"no *.xml templates under {path}")
    for line in report.lines():
        print(terminal_text(line), file=out)
    verdict = "ok" if report.ok else "invalid"
    print(f"{verdict}: {len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)", file=out)
    return 0 if report.ok else 1
