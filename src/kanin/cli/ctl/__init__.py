"""`kanin ctl`: manage a running broker over its management HTTP API, with rabbitmqctl's
command names (https://www.rabbitmq.com/rabbitmqctl.8.html). It works against RabbitMQ's
management API as well as kanin's."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from kanin.cli.ctl import access, live, node, policies, topology
from kanin.cli.ctl.errors import CtlError
from kanin.cli.ctl.http import Api
from kanin.cli.ctl.output import Output
from kanin.cli.ctl.parser import DEFAULT_TIMEOUT_S, DEFAULT_URL, Commands, Parser, common_options

EXIT_CODES = """exit status (sysexits, as rabbitmqctl's):
  0 done, 64 usage, 65 the server refused the data (no such queue or vhost, a bad
  argument), 66 cannot read the file, 67 no such user, 69 no answer at the URL / failed
  health check / API the server lacks, 70 server error, 73 cannot write the file,
  75 timeout, 77 credentials refused or not allowed"""


def build_parser() -> Parser:
    common = common_options()
    parser = Parser(
        prog="kanin ctl",
        description="Manage a running broker (kanin or RabbitMQ) over its management HTTP API.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="command")
    commands = Commands(subparsers, common)
    for family in (access, topology, live, policies, node):
        family.register(commands)
    return parser


def connection(args: argparse.Namespace, environ: Mapping[str, str]) -> Api:
    return Api(
        url=getattr(args, "url", None) or environ.get("KANIN_CTL_URL") or DEFAULT_URL,
        username=_given(args, "username", environ.get("KANIN_CTL_USERNAME"), "guest"),
        password=_given(args, "password", environ.get("KANIN_CTL_PASSWORD"), "guest"),
        timeout=getattr(args, "timeout", DEFAULT_TIMEOUT_S),
    )


def _given(args: argparse.Namespace, name: str, from_env: str | None, default: str) -> str:
    value = getattr(args, name, None)
    if value is not None:
        return str(value)
    return from_env if from_env is not None else default


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    out = Output(
        as_json=getattr(args, "json", False),
        headers=not getattr(args, "no_table_headers", False),
        quiet=getattr(args, "quiet", False),
    )
    try:
        api = connection(args, os.environ)
        return args.run(api, args, out) or 0
    except CtlError as error:
        print(f"kanin ctl: {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:  # `kanin ctl list_queues | head`: the reader has seen enough
        # Point stdout at /dev/null so that the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
