"""`raftsched submit FILE [--watch]`: validate locally, submit the wire form with an idempotency
key, follow; `raftsched submit FILE FILE... | DIR`: one SubmitJobs batch, an answer per file."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from raftsched import limits
from raftsched.cli import render, watching
from raftsched.cli.common import (
    CONNECTION,
    EXIT_INVALID,
    EXIT_OK,
    ClientLike,
    CommandError,
    Interrupted,
    Subparsers,
    add_param_option,
    command_parser,
    connect,
    param_values,
    print_issues,
    print_json,
    read_stdin,
    report_error,
    unknown_outcome,
)
from raftsched.errors import Code, RaftschedError
from raftsched.spec.file import read_spec_file
from raftsched.spec.issue import SpecIssue
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.params import params_refused

# --- submit ---------------------------------------------------------------------------------------

_SUBMIT_HELP = """\
Validate a job spec locally (exactly like `raftsched validate`), then submit it to the
scheduler in its wire form (the replicas parse no YAML or JSON, whatever the file's size).
Every submission carries an idempotency key (--idempotency-key, else the spec's
idempotency_key, else a fresh one): sending the same spec again with the same key returns the
same job instead of creating a second one, so a submit whose outcome is unknown is safe to
repeat. With --watch, follow the job until it finishes. --param NAME=VALUE (repeatable) gives
a value to one of the spec's `params:` (overriding its default; required for a param without
one); the values are part of the job's identity: the same key with other values is refused."""

_SUBMIT_OUTPUT = """\
output:
  stdout "submitted job JOB_ID (new; idempotency key K)", or "(already existed: ...)" when the
  key was seen with this same spec. A spec with problems: the `validate` error lines, exit 2.
  --watch: on a terminal one status line redrawn in place (progress bar, done/total, state,
  counts by state, elapsed); otherwise a progress line per change, e.g.
    [12:00:01] RUNNING  3/7 done  (SUCCEEDED 3, RUNNING 2, RUNNABLE 2)
  then the table TASK STATE ATTEMPTS CLUSTER FENCE EXIT (REASON), then the outcome line;
  exit 0 if the job SUCCEEDED, 1 if it ended FAILED or CANCELLED. Ctrl-C stops watching
  (exit 130), not the job.
  --json: {"job_id", "created", "idempotency_key"}; with --watch also "state", "tasks"
  ({STATE: count} of the final job) and "task_summaries" (the `job tasks` list).
  A bad spec with --json: {"error": {"code": "INVALID_ARGUMENT", "message", "issues":
  [{"path", "task", "message"}]}}.
  Several FILEs or a DIR (its *.yaml, *.yml, *.json, sorted): each is checked here, those
  without problems go in one SubmitJobs batch; a line per file, "FILE: submitted job JOB_ID
  (new)" / "(already existed)" or "FILE: refused: CODE: message"; exit 2 if any was refused.
  --json: a list of {"file", "job_id", "created"} or {"file", "error": {"code", "message"}}.
  --watch and --idempotency-key take one FILE; --param applies to every FILE, and the command
  refuses (naming the file) before sending anything unless every file has those params."""


def register_submit(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = command_parser(commands, "submit", [common, CONNECTION],
                             "submit a job spec file (optionally watch it run)",
                             _SUBMIT_HELP, _SUBMIT_OUTPUT)
    parser.add_argument("file", metavar="FILE", nargs="+",
                        help="job spec (YAML or JSON); '-' reads stdin; several files or a "
                             "directory (its *.yaml, *.yml, *.json, sorted) are sent in one "
                             "batch (SubmitJobs)")
    parser.add_argument("--watch", action="store_true",
                        help="show progress until the job finishes, then every task's outcome")
    parser.add_argument("--idempotency-key", metavar="KEY",
                        help="overrides the spec's idempotency_key")
    add_param_option(parser)
    parser.set_defaults(handler=_run_submit)



def _run_submit(args: argparse.Namespace) -> int:
    if len(args.file) > 1 or os.path.isdir(args.file[0]):
        return _run_submit_many(args)
    args.file = args.file[0]
    params = param_values(args)
    try:
        text = _read_spec_text(args.file)
        spec = parse_spec_text(text, source="<stdin>" if args.file == "-" else args.file,
                               params=params)
    except SpecError as error:
        return _spec_refused(args, error)
    key = _idempotency_key(args.idempotency_key, spec)
    with connect(args) as client:
        try:
            submitted = _submit(client, spec, key, args.file)
        except SpecError as error:  # its wire form is too large
            return _spec_refused(args, error)
        document: dict[str, Any] = {"job_id": submitted.job_id, "created": submitted.created,
                                    "idempotency_key": key}
        if not args.json:
            print(_submitted_line(submitted.job_id, submitted.created, key), flush=True)
        if not args.watch:
            if args.json:
                print_json(document)
            else:
                print(f"follow it with: raftsched job status {submitted.job_id}")
            return EXIT_OK
        try:
            final = watching.follow(args, client, submitted.job_id)
            tasks = [render.task_doc(task) for task in client.list_tasks(submitted.job_id).tasks]
        except CommandError:
            raise
        except RaftschedError as error:
            raise CommandError(error.code, error.message,
                               hint=f"job {submitted.job_id} was submitted and goes on; follow "
                               f"it with: raftsched job status {submitted.job_id}") from None
    return watching.print_outcome(args, document, final, tasks)


def _read_spec_text(file: str) -> bytes | str:
    """The spec's bytes, read like `validate` reads them (an unreadable file, or one that is not
    a regular file, is a SpecError)."""
    if file == "-":
        try:
            return read_stdin()
        except OSError as error:
            raise SpecError([SpecIssue("", f"cannot read stdin: {error}")]) from None
    return read_spec_file(file)


def _spec_refused(args: argparse.Namespace, error: SpecError) -> int:
    if not args.json:
        print_issues(error.issues)
        return EXIT_INVALID
    issues = [{"path": i.path, "task": i.task, "message": i.message} for i in error.issues]
    return report_error(args, CommandError(Code.INVALID_ARGUMENT, str(error),
                                           details={"issues": issues}))


def _idempotency_key(flag: str | None, spec: JobSpec) -> str:
    """`keys.submit_key`, the client's one rule; a too-long flag is refused here, naming it.
    (Imported here: start-up imports nothing of the client, test_commands checks.)"""
    from raftsched.client.keys import submit_key

    if flag and len(flag) > limits.MAX_IDEMPOTENCY_KEY_CHARS:
        raise CommandError(Code.INVALID_ARGUMENT, f"--idempotency-key: at most "
                                                  f"{limits.MAX_IDEMPOTENCY_KEY_CHARS} characters")
    return submit_key(flag, spec)


def _submit(client: ClientLike, spec: JobSpec, key: str, file: str) -> Any:
    """Send the spec parsed and validated here, as it is (`submit_spec`: the client parses
    nothing again; it sends the wire form, so the replicas parse no document)."""
    retry = (f"running the same command again with --idempotency-key {key} is safe: the "
             "scheduler then returns the job instead of creating a second one")
    try:
        return client.submit_spec(spec, idempotency_key=key)
    except RaftschedError as error:
        raise unknown_outcome(error, "the job", retry) from None
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: job {file} may or may not have been submitted; "
                          f"{retry}") from None


def _submitted_line(job_id: str, created: bool, key: str) -> str:
    if created:
        return f"submitted job {job_id} (new; idempotency key {key})"
    return (f"submitted job {job_id} (already existed: same spec and idempotency key {key}; "
            f"nothing new was created)")


# --- many files: one batch ------------------------------------------------------------------------

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
"""What `raftsched submit DIR` sends of the directory's files."""


def _run_submit_many(args: argparse.Namespace) -> int:
    """Each file checked here (a file with problems is answered here and not sent), the rest sent
    in one SubmitJobs batch; one answer per file, in order; exit 2 if any was refused."""
    if args.watch:
        raise CommandError(Code.INVALID_ARGUMENT, "--watch follows one job: submit one FILE to "
                           "watch it (or follow each with `raftsched job watch JOB_ID`)")
    if args.idempotency_key:
        raise CommandError(Code.INVALID_ARGUMENT, "--idempotency-key names one job: with many "
                           "files set idempotency_key in each spec")
    files = _spec_files(args.file)
    params = param_values(args)
    answers: dict[str, dict[str, Any]] = {}
    parsed: list[tuple[str, JobSpec]] = []
    for file in files:
        try:
            parsed.append((file, parse_spec_text(read_spec_file(file), source=file,
                                                 params=params)))
        except SpecError as error:
            _refuse_params(file, error)
            shown = error.issues[:limits.MAX_REPORTED_SPEC_ISSUES]
            answers[file] = _error_doc(file, Code.INVALID_ARGUMENT,
                                       "; ".join(issue.render() for issue in shown))
    if parsed:
        answers.update(_submit_batch(args, parsed))
    documents = [answers[file] for file in files]
    for document in documents:
        if not args.json:
            print(_batch_line(document))
    if args.json:
        print_json(documents)
    return EXIT_INVALID if any("error" in d for d in documents) else EXIT_OK


def _refuse_params(file: str, error: SpecError) -> None:
    """A --param that one of several files does not take refuses the whole command."""
    if params_refused(error):
        raise CommandError(Code.INVALID_ARGUMENT, f"{file}: {error}",
                           hint="--param applies to every FILE: nothing was sent")


def _spec_files(paths: list[str]) -> list[str]:
    """The files named, a directory standing for its spec files (sorted by name)."""
    files: list[str] = []
    for path in paths:
        if path == "-":
            raise CommandError(Code.INVALID_ARGUMENT, "'-' (stdin) is one job: submit it alone")
        if not os.path.isdir(path):
            files.append(path)
            continue
        inside = sorted(name for name in os.listdir(path) if name.endswith(SPEC_SUFFIXES))
        if not inside:
            raise CommandError(Code.INVALID_ARGUMENT, f"{path}: no *.yaml, *.yml or *.json "
                                                      "file in this directory")
        files.extend(os.path.join(path, name) for name in inside)
    return files


def _submit_batch(args: argparse.Namespace,
                  parsed: list[tuple[str, JobSpec]]) -> dict[str, dict[str, Any]]:
    # Each job's key is the spec's, else a fresh `auto-` one made once before the call's first
    # try (`keys.submit_key`): the client's retries are safe; a rerun of the command is only
    # for the specs that set idempotency_key.
    retry = ("running the same command again is safe for the specs that set idempotency_key "
             "(the scheduler returns their jobs); the others would be submitted again")
    with connect(args) as client:
        try:
            results = client.submit_jobs([spec for _, spec in parsed],
                                         labels=[f"file {file}" for file, _ in parsed])
        except RaftschedError as error:
            raise unknown_outcome(error, "the jobs", retry) from None
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: the jobs may or may not have been submitted; "
                              f"{retry}") from None
    answers: dict[str, dict[str, Any]] = {}
    for (file, _), result in zip(parsed, results, strict=True):
        if isinstance(result, RaftschedError):
            answers[file] = _error_doc(file, result.code, result.message)
        else:
            answers[file] = {"file": file, "job_id": result.job_id, "created": result.created}
    return answers


def _error_doc(file: str, code: Code, message: str) -> dict[str, Any]:
    return {"file": file, "error": {"code": code.value, "message": message}}


def _batch_line(document: dict[str, Any]) -> str:
    if "error" in document:
        error = document["error"]
        # The scheduler's message names the job by its place and file: the line names the file.
        named = re.compile(rf"^jobs\[\d+\] \(file {re.escape(document['file'])}\) ")
        message = named.sub("", error["message"], count=1)
        return f"{document['file']}: refused: {error['code']}: {message}"
    state = "new" if document["created"] else "already existed"
    return f"{document['file']}: submitted job {document['job_id']} ({state})"
