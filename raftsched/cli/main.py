"""The `raftsched` command line.

Each subcommand is one `_register_<name>` function that adds its parser (with the shared
`--json` option) and sets `handler`; adding a subcommand is adding such a function to
`_COMMANDS`. A handler returns the exit code. Conventions for every subcommand:
- `--json` prints exactly one JSON document on stdout, whatever the outcome (an error is
  `{"error": {"code", "message", ...}}`);
- otherwise results go to stdout and problems to stderr as one `error: CODE: message` line;
- exit codes: 0 success; 1 a watched job ended FAILED or CANCELLED; 2 refused input or usage
  (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, a bad
  spec, a local OS error); 3 no answer or an unknown outcome (UNAVAILABLE, DEADLINE_EXCEEDED);
  130 interrupted; 141 the reader of stdout went away (`... | head`), silently.
Expected failures never show a Python traceback. Commands that talk to a cluster get their
client from `make_client` (tests replace it); what they print is built by `raftsched.cli.render`.
`raftsched validate` imports neither grpc nor the server: those are imported inside handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from raftsched.cli.admin import register_admin
from raftsched.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_INVALID,
    CommandError,
    Handler,
    Interrupted,
    Subparsers,
    os_message,
    report_error,
    report_interrupt,
)
from raftsched.cli.completion import register_completion
from raftsched.cli.dev import register_dev
from raftsched.cli.events import register_events
from raftsched.cli.job import register_job
from raftsched.cli.schedule import register_schedule
from raftsched.cli.servers import register_servers
from raftsched.cli.submit import register_submit
from raftsched.cli.task import register_task
from raftsched.cli.validate import register_validate
from raftsched.errors import Code, RaftschedError


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the process exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "passthrough", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    args.extra = extra
    handler: Handler = args.handler
    try:
        return handler(args)
    except (KeyboardInterrupt, Interrupted) as stop:
        return report_interrupt(args, str(stop) if isinstance(stop, Interrupted) else "")
    except RaftschedError as error:
        return report_error(args, error)
    except BrokenPipeError:
        return _reader_gone()
    except OSError as error:
        return report_error(args, CommandError(Code.FAILED_PRECONDITION, os_message(error)))


def _reader_gone() -> int:
    """stdout's reader closed the pipe: point stdout at /dev/null so the interpreter's final
    flush cannot raise again (the recipe of Python's signal module documentation), say nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


class _Version(argparse.Action):
    """--version, worked out only when asked (the snapshot module is not light to import)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """`raftsched X.Y.Z (snapshot format N, Python A.B.C)`: the installed package's version."""
    from importlib import metadata

    from raftsched.state.snapshot import FORMAT_VERSION

    try:
        version = metadata.version("raftsched")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown (not installed)"
    return (f"raftsched {version} (snapshot format {FORMAT_VERSION}, Python "
            f"{'.'.join(map(str, sys.version_info[:3]))})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftsched",
        description="raftsched: a Raft-replicated DAG job scheduler.",
        epilog="Run 'raftsched COMMAND --help' for what a command does and prints.\n"
        "exit status: 0 ok; 1 a job followed by `submit --watch` ended FAILED or CANCELLED;\n"
        "  2 refused (bad input, unknown id, key conflict, wrong state, a limit) or usage "
        "error;\n  3 no replica answered, or the outcome of a change is unknown; "
        "130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version (and the snapshot format it reads) and exit")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print exactly one JSON object on stdout"
    )
    for register in _COMMANDS:
        register(commands, common)
    return parser


_COMMANDS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    register_validate,
    register_submit,
    register_job,
    register_schedule,
    register_task,
    register_events,
    register_admin,
    register_dev,
    register_servers,
    register_completion,
)


if __name__ == "__main__":
    raise SystemExit(main())
