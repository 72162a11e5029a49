"""`kanin ctl`'s command line: options shared by every command (the URL, credentials,
output), accepted before or after the command's name, and a helper the command modules
use to declare theirs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from kanin.cli.ctl.errors import EX_USAGE
from kanin.cli.ctl.http import Api
from kanin.cli.ctl.output import Output

DEFAULT_URL = "http://127.0.0.1:15672"
DEFAULT_TIMEOUT_S = 60.0  # rabbitmqctl's default timeout

Run = Callable[[Api, argparse.Namespace, Output], int | None]


class Parser(argparse.ArgumentParser):
    """Usage errors exit EX_USAGE (64), as rabbitmqctl's do, not argparse's 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def common_options() -> Parser:
    """The shared options. Defaults are applied later (main), from the environment or the
    built-in ones: a SUPPRESSed default never overwrites a value given before the command."""
    common = Parser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help=f"the management API (default $KANIN_CTL_URL, else {DEFAULT_URL})",
    )
    group.add_argument(
        "--username",
        default=argparse.SUPPRESS,
        help="user to log in as (default $KANIN_CTL_USERNAME, else guest)",
    )
    group.add_argument(
        "--password",
        default=argparse.SUPPRESS,
        help="its password (default $KANIN_CTL_PASSWORD, else guest)",
    )
    group.add_argument(
        "-t",
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        help=f"seconds to wait for each answer; await_startup's whole wait "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON (lists: an array of objects with the columns asked for)",
    )
    group.add_argument(
        "--no-table-headers",
        action="store_true",
        default=argparse.SUPPRESS,
        help="leave out the header line of tables",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print no confirmation after a change",
    )
    return common


class Commands:
    """What the command modules add their commands to."""

    def __init__(self, subparsers: argparse._SubParsersAction[Parser], common: Parser) -> None:
        self._subparsers = subparsers
        self._common = common

    def add(self, name: str, run: Run, summary: str, vhost: bool = False) -> Parser:
        parser = self._subparsers.add_parser(
            name, help=summary, description=summary, parents=[self._common]
        )
        if vhost:
            parser.add_argument(
                "-p", "--vhost", default="/", help="the virtual host (default /)"
            )
        parser.set_defaults(run=run)
        return parser

    def listing(self, name: str, run: Run, summary: str, vhost: bool = False) -> Parser:
        """A list_* command: optional column names, as rabbitmqctl's info items."""
        parser = self.add(name, run, summary, vhost)
        parser.add_argument("columns", nargs="*", metavar="column", help="columns to show")
        return parser
