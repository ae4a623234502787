"""`raftsched validate FILE`: check a job spec without contacting a scheduler."""

from __future__ import annotations

import argparse
from typing import Any

from raftsched.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    Subparsers,
    add_param_option,
    param_values,
    print_issues,
    print_json,
    read_stdin,
)
from raftsched.spec.file import read_spec_file
from raftsched.spec.issue import SpecIssue
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import JobSpec, SpecError

# --- validate -------------------------------------------------------------------------------------

_VALIDATE_HELP = """\
Check a job spec file (YAML or JSON, the format `raftsched submit` takes) without contacting
any scheduler: field names and types, bounds, defaults, and the dependency graph (unknown or
duplicate task ids, tasks depending on themselves, cycles). Every problem is reported, not
just the first. --param NAME=VALUE (repeatable) checks it with that value for a param, as
`raftsched submit` would send it."""

_VALIDATE_OUTPUT = """\
output:
  valid:     stdout "ok: N tasks, M edges" (M = number of depends_on entries); exit 0
  invalid:   stderr one "error: PATH: MESSAGE" line per problem, e.g.
               error: tasks[2] (load).resources.cpu: must be a number > 0, got -1
             then "N error(s)"; exit 2
  --json:    stdout one object, exit 0 or 2:
               {"ok": true, "file": F, "name": NAME, "tasks": N, "edges": M,
                "params": {NAME: VALUE}} ("params" when the spec has any)
               {"ok": false, "file": F, "errors": [{"path": P, "task": ID|null, "message": M}]}
  A cycle "a -> b -> a" reads "a depends on b, b depends on a"."""


def register_validate(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "validate",
        parents=[common],
        help="check a job spec file and report every problem",
        description=_VALIDATE_HELP,
        epilog=_VALIDATE_OUTPUT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="FILE",
                        help="job spec, a regular file (YAML or JSON); '-' reads stdin (a pipe)")
    add_param_option(parser)
    parser.set_defaults(handler=_run_validate)


def _run_validate(args: argparse.Namespace) -> int:
    file: str = args.file
    params = param_values(args)
    try:
        spec = _read_spec(file, params)
    except SpecError as error:
        if args.json:
            errors = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
            print_json({"ok": False, "file": file, "errors": errors})
        else:
            print_issues(error.issues)
        return EXIT_INVALID
    if args.json:
        print_json(_valid_summary(file, spec))
    else:
        print(f"ok: {len(spec.tasks)} tasks, {spec.edge_count()} edges")
    return EXIT_OK


def _valid_summary(file: str, spec: JobSpec) -> dict[str, Any]:
    """The --json answer of a valid spec; "params" (effective values) only when it has any."""
    params = {"params": dict(spec.params)} if spec.params else {}
    return {
        "ok": True,
        "file": file,
        "name": spec.name,
        "tasks": len(spec.tasks),
        "edges": spec.edge_count(),
        **params,
    }


def _read_spec(file: str, params: dict[str, str]) -> JobSpec:
    """The spec in `file`, or on stdin for '-', with the --param values."""
    if file != "-":
        return parse_spec_text(read_spec_file(file), source=file, params=params)
    try:
        data = read_stdin()
    except OSError as error:
        raise SpecError([SpecIssue("", f"cannot read stdin: {error}")]) from None
    return parse_spec_text(data, source="<stdin>", params=params)


