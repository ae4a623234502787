"""`raftsched admin snapshot save FILE | inspect FILE | export --data-dir DIR FILE`: back up the
replicated state, read a backup offline, or rescue a stopped replica's state when a majority is
lost. Restoring is `raftsched replica --restore-from FILE` on a new cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from raftsched import files
from raftsched.cli import render
from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    CommandError,
    Interrupted,
    command_parser,
    connect,
    print_json,
)
from raftsched.errors import Code, RaftschedError
from raftsched.state import snapshot
from raftsched.state.model import TERMINAL_JOB_STATES
from raftsched.state.text import visible

PROGRESS_EVERY_BYTES = 16 * 1024 * 1024
"""`save` says how far it got on stderr this often (and at the end)."""


def register_snapshot(sub: Any, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "snapshot", help="save the replicated state to a file, or read such a file",
        description="Back up the replicated state: 'save' asks the leader for a consistent "
        "snapshot and writes it to FILE; 'inspect' reads FILE offline. To restore, start a new "
        "cluster whose replicas all get 'raftsched replica --restore-from FILE' (see the "
        "README, \"Backup and restore\").")
    commands = group.add_subparsers(title="snapshot commands", metavar="COMMAND", required=True)
    save = command_parser(
        commands, "save", [common, CONNECTION], "write a snapshot the leader takes now to FILE",
        "Ask the leader for a snapshot of the whole replicated state taken now (its forked "
        "child writes one, as for log compaction: the leader keeps serving) and write it to "
        "FILE, checked against the sha256 the leader sends. Admin role. The file is written "
        "to FILE.partial, made new and readable by you only (mode 0600: a snapshot holds "
        "every job's env values), and renamed once complete, so FILE is never half a "
        "snapshot. An existing FILE.partial (another save's, or a planted link) is refused, "
        "never written through or removed.",
        "output:\n  progress on stderr; then \"saved snapshot at index I (term T): N bytes "
        "to FILE\"\n"
        '  --json: {"file", "index", "term", "bytes", "sha256"}\n'
        "  exit 2 if FILE exists (without --force), FILE.partial exists, or its directory is "
        "not writable")
    save.add_argument("file", metavar="FILE")
    save.add_argument("--force", action="store_true", help="replace FILE if it exists")
    save.set_defaults(handler=_run_save)
    inspect = command_parser(
        commands, "inspect", [common], "what a saved snapshot holds (offline)",
        "Read a saved snapshot without any cluster: its format version, the Raft index and "
        "term it was taken at, the members it names, counts of what it holds, and two "
        "digests: state_digest (the whole state, as `admin status --digest` computes it at "
        "that index) and jobs_digest (the jobs and their tasks' attempts alone, which a "
        "restore keeps even after the new cluster's clock and addresses move on).",
        "output:\n  one \"field  value\" line each\n"
        '  --json: {"file", "format", "index", "term", "members", "jobs", "live_jobs",'
        '\n           "tasks", "clusters", "tenants", "tokens", "now_ms", "state_digest",'
        ' "jobs_digest"}\n  exit 2 if FILE is not a saved snapshot')
    inspect.add_argument("file", metavar="FILE")
    inspect.set_defaults(handler=_run_inspect)
    export = command_parser(
        commands, "export", [common], "a STOPPED replica's state, from its data dir, to FILE",
        "For when a majority of the replicas is lost for good (nothing can commit, so 'save' "
        "cannot run): read the data dir of a stopped surviving replica — its last snapshot "
        "and every journal entry after it, applied as the replica would — and write the state "
        "to FILE as a saved snapshot, to start a new cluster from with 'raftsched replica "
        "--restore-from FILE'. The data dir is only read (refused while a replica runs on it). "
        "Data-loss caveat: entries only the lost replicas had are gone; entries this replica "
        "held but that never committed are kept (their clients were told the outcome was "
        "unknown; a retry with the same idempotency key is safe). Pick the survivor with the "
        "highest index (`snapshot inspect` the exports).",
        "output:\n  \"exported DIR at index I (term T; N journal entries replayed) to FILE\"\n"
        '  --json: {"file", "data_dir", "index", "term", "replayed", "members"}\n'
        "  exit 2 if FILE exists (without --force), or DIR is in use or holds no replica state")
    export.add_argument("--data-dir", required=True, metavar="DIR",
                        help="the stopped replica's --data-dir")
    export.add_argument("file", metavar="FILE")
    export.add_argument("--force", action="store_true", help="replace FILE if it exists")
    export.set_defaults(handler=_run_export)


def _run_save(args: argparse.Namespace) -> int:
    target = Path(args.file)
    _refuse_to_overwrite(target, args.force)
    partial = f"{target}{files.PARTIAL_SUFFIX}"
    shown = [0]

    def progress(received: int, size: int) -> None:
        if received - shown[0] >= PROGRESS_EVERY_BYTES or received == size:
            shown[0] = received
            print(f"received {received / 1e6:.1f} of {size / 1e6:.1f} MB", file=sys.stderr,
                  flush=True)

    try:
        with connect(args, one_group=True) as client, files.written_whole(str(target)) as out:
            print("asking the leader for a snapshot (it writes one now)", file=sys.stderr,
                  flush=True)
            saved = client.save_snapshot(out, progress)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: {target} was not written") from None
    except files.InTheWay as error:
        raise CommandError(Code.FAILED_PRECONDITION, str(error),
                           details={"partial": error.partial}) from None
    except OSError as error:
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"cannot write {partial}: {error.strerror}") from None
    document = {"file": str(target), "index": saved.index, "term": saved.term,
                "bytes": saved.size, "sha256": saved.sha256}
    if args.json:
        print_json(document)
    else:
        print(f"saved snapshot at index {saved.index} (term {saved.term}): {saved.size} bytes "
              f"to {target}")
    return EXIT_OK


def _run_export(args: argparse.Namespace) -> int:
    target = Path(args.file)
    _refuse_to_overwrite(target, args.force)
    if not Path(args.data_dir).is_dir():
        raise CommandError(Code.FAILED_PRECONDITION, f"{args.data_dir} is not a directory")
    # Imported here: the Raft adapter (and pysyncobj) loads only for this command. A plain
    # import, so the layer contracts see it (cli sits above the replica: allowed).
    from raftsched.replica.raft.export import export_state
    try:
        exported = export_state(args.data_dir, str(target))
    except RaftschedError as error:
        raise CommandError(error.code, error.message) from None
    except OSError as error:
        raise CommandError(Code.FAILED_PRECONDITION,
                           f"cannot write {target}: {error.strerror}") from None
    if args.json:
        print_json({"file": str(target), "data_dir": args.data_dir, "index": exported.index,
                    "term": exported.term, "replayed": exported.replayed,
                    "members": list(exported.members)})
    else:
        print(f"exported {args.data_dir} at index {exported.index} (term {exported.term}; "
              f"{exported.replayed} journal entries replayed) to {target}")
    return EXIT_OK


def _refuse_to_overwrite(target: Path, force: bool) -> None:
    if target.exists() and not force:
        raise CommandError(Code.ALREADY_EXISTS, f"{target} exists",
                           hint="pass --force to replace it")


def _run_inspect(args: argparse.Namespace) -> int:
    document = inspect_file(Path(args.file))
    if args.json:
        print_json(document)
        return EXIT_OK
    rows = [(key.replace("_", " "), ", ".join(value) if isinstance(value, list) else str(value))
            for key, value in document.items()]
    rows[rows.index(("now ms", str(document["now_ms"])))] = (
        "state time", render.format_time_ms(document["now_ms"]))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {visible(value)}")
    return EXIT_OK


def inspect_file(path: Path) -> dict[str, Any]:
    """What `snapshot inspect --json` prints; CommandError INVALID_ARGUMENT for a file that is
    not a snapshot a replica wrote."""
    if not path.is_file():
        raise CommandError(Code.INVALID_ARGUMENT, f"{path} is not a regular file")
    try:
        with path.open("rb") as source:
            header = source.read(len(snapshot.MAGIC) + 2)
            source.seek(0)
            state, extra = snapshot.load_with_extra(source)
        last, _previous, members = snapshot.parse_raft_extra(extra)
    except OSError as error:
        raise CommandError(Code.INVALID_ARGUMENT, f"cannot read {path}: {error.strerror}") \
            from None
    except snapshot.SnapshotError as error:
        raise CommandError(Code.INVALID_ARGUMENT, f"{path} is not a saved snapshot: {error}") \
            from None
    return {
        "file": str(path), "format": int.from_bytes(header[len(snapshot.MAGIC):], "big"),
        "index": last[1], "term": last[2], "members": sorted(members),
        "jobs": len(state.jobs),
        "live_jobs": sum(1 for job in state.jobs.values()
                         if job.state not in TERMINAL_JOB_STATES),
        "tasks": state.task_count, "clusters": len(state.clusters),
        "tenants": len(state.tenants), "tokens": len(state.tokens), "now_ms": state.now_ms,
        "state_digest": snapshot.digest(state), "jobs_digest": snapshot.jobs_digest(state),
    }
