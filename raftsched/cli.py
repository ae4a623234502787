"""The `raftsched` command line.

Each subcommand is one `_register_<name>` function that adds its parser (with the shared
`--json` option) and sets `handler`; adding a subcommand is adding such a function to
`_COMMANDS`. A handler returns the exit code. Conventions for every subcommand:
- `--json` prints exactly one JSON object on stdout, whatever the outcome;
- otherwise results go to stdout and problems to stderr as `error: ...` lines;
- exit 0 on success, 2 when the input is refused (argparse also uses 2 for usage errors).
Bad input never shows a Python traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from raftsched import limits
from raftsched.spec import JobSpec, SpecError, SpecIssue, load_spec_file, parse_spec_text

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftsched",
        description="raftsched: a Raft-replicated DAG job scheduler.",
        epilog="Run 'raftsched COMMAND --help' for what a command does and prints. "
        "Exit status: 0 success, 2 refused input or usage error.",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print exactly one JSON object on stdout"
    )
    for register in _COMMANDS:
        register(commands, common)
    return parser


def _print_json(document: dict[str, Any]) -> None:
    print(json.dumps(document))


def _print_issues(issues: Sequence[SpecIssue]) -> None:
    for issue in issues:
        print(f"error: {issue.render()}", file=sys.stderr)
    print(f"{len(issues)} error(s)", file=sys.stderr)


# --- validate -------------------------------------------------------------------------------------

_VALIDATE_HELP = """\
Check a job spec file (YAML or JSON, the format `raftsched submit` takes) without contacting
any scheduler: field names and types, bounds, defaults, and the dependency graph (unknown or
duplicate task ids, tasks depending on themselves, cycles). Every problem is reported, not
just the first."""

_VALIDATE_OUTPUT = """\
output:
  valid:     stdout "ok: N tasks, M edges" (M = number of depends_on entries); exit 0
  invalid:   stderr one "error: PATH: MESSAGE" line per problem, e.g.
               error: tasks[2] (load).resources.cpu: must be a number > 0, got -1
             then "N error(s)"; exit 2
  --json:    stdout one object, exit 0 or 2:
               {"ok": true, "file": F, "name": NAME, "tasks": N, "edges": M}
               {"ok": false, "file": F, "errors": [{"path": P, "task": ID|null, "message": M}]}
  A cycle "a -> b -> a" reads "a depends on b, b depends on a"."""


def _register_validate(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "validate",
        parents=[common],
        help="check a job spec file and report every problem",
        description=_VALIDATE_HELP,
        epilog=_VALIDATE_OUTPUT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE", help="job spec (YAML or JSON); '-' reads stdin")
    parser.set_defaults(handler=_run_validate)


def _run_validate(args: argparse.Namespace) -> int:
    file: str = args.file
    try:
        spec = _read_spec(file)
    except SpecError as error:
        if args.json:
            errors = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
            _print_json({"ok": False, "file": file, "errors": errors})
        else:
            _print_issues(error.issues)
        return EXIT_INVALID
    if args.json:
        _print_json(_valid_summary(file, spec))
    else:
        print(f"ok: {len(spec.tasks)} tasks, {spec.edge_count()} edges")
    return EXIT_OK


def _valid_summary(file: str, spec: JobSpec) -> dict[str, Any]:
    return {
        "ok": True,
        "file": file,
        "name": spec.name,
        "tasks": len(spec.tasks),
        "edges": spec.edge_count(),
    }


def _read_spec(file: str) -> JobSpec:
    """The spec in `file`, or on stdin for '-'."""
    if file != "-":
        return load_spec_file(file)
    try:
        data = _read_stdin()
    except OSError as error:
        raise SpecError([SpecIssue("", f"cannot read stdin: {error}")]) from None
    return parse_spec_text(data, source="<stdin>")


def _read_stdin() -> str | bytes:
    """At most one byte more than a spec may have (the size check then refuses it)."""
    if sys.stdin is None:
        raise OSError("no standard input")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        data: bytes = buffer.read(limits.MAX_SPEC_BYTES + 1)
        return data
    return sys.stdin.read(limits.MAX_SPEC_BYTES + 1)


_COMMANDS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    _register_validate,
)


if __name__ == "__main__":
    raise SystemExit(main())
