"""The checker on a run that grew (`run --grow`, docs/scale-out.md §5): group 0 began as the
deployment's one group, group 1 joined, and half of the shards moved to it during the run.

The workload does not know in advance which group a submit or read goes to, so its invokes
record none; the checker finds each job in the group whose log holds it, and judges a job's
group against its shard's owner or former owners in the newest map. Each group is a `Run` of
tests/jepsen/test_checker.py (the real FSM, so every SHARD_MAP_SET and KEYS_IMPORT below is
one the apply rules accept), written as one results folder by test_checks_groups.py's `write`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raftsched import limits, topology
from raftsched.state import commands as c
from raftsched.state.results import JobSubmitted, Result
from tests.support import paths

sys.path.insert(0, str(paths.JEPSEN_STYLE))

from jepsen import checker
from jepsen.checks_groups import grow_figures
from jepsen.checks_history import _Findings, _History

from tests.jepsen.test_checker import J1, J3, Run, _wire, checks
from tests.jepsen.test_checks_groups import write

TENANT = "alpha"
MOVES = tuple(topology.balancing_moves(bytes(limits.VIRTUAL_SHARDS), 2))
"""Group 0's highest half of the shards, to group 1 (what `admin groups add` marks)."""
MOVED = frozenset(shard for shard, _ in MOVES)
GROW_ROW = "shards moved to the joining group (--grow)"


def key_where(prefix: str, moved: bool, implicit_owner: int) -> str:
    """The first key `prefix`-n of TENANT whose shard moved (or not) and is group
    `implicit_owner`'s by the rule of a deployment that never grew (shard mod 2)."""
    return next(key for key in (f"{prefix}-{n}" for n in range(10_000))
                if (topology.shard_of_key(TENANT, key) in MOVED) == moved
                and topology.shard_of_key(TENANT, key) % 2 == implicit_owner)


OLD_KEY = key_where("old", moved=True, implicit_owner=1)
"""Group 0's job from before the move, in a shard that moved: handed over to group 1."""
SECOND_KEY = key_where("second", moved=True, implicit_owner=0)
"""Group 0's second job from before the move, in a shard that moved."""
STAY_KEY = key_where("stay", moved=False, implicit_owner=0)
"""Group 0's job from after the move, in a shard it kept."""
NEW_KEY = key_where("new", moved=True, implicit_owner=0)
"""Group 1's job, made after the hand-over in a shard that moved to it."""


def keyed_id(key: str, n: int) -> str:
    """A job id naming the shard of TENANT's `key` (as the client makes it)."""
    return f"jepsen-{topology.job_id_tail(topology.shard_of_key(TENANT, key), n)}"


OLD, SECOND, STAY, NEW, DUPLICATE = (keyed_id(OLD_KEY, 1), keyed_id(SECOND_KEY, 2),
                                     keyed_id(STAY_KEY, 3), keyed_id(NEW_KEY, 4),
                                     keyed_id(SECOND_KEY, 5))


def apply(run: Run, cmd: c.Command) -> Result:
    """`cmd` through the harness (encoded, applied to `run.h.state`, which must accept it) and
    into the run's applied log."""
    result = run.h.ok(cmd)
    run.sync()
    return result


def shard_maps(now_ms: int) -> tuple[c.ShardMapSet, c.ShardMapSet]:
    """The move's maps: epoch 1 marks MOVES; epoch 2 hands them over, group 0 their former
    owner."""
    marked = c.ShardMapSet(1, 2, bytes(limits.VIRTUAL_SHARDS), MOVES, (), 2, (), now_ms)
    owners = bytes(1 if shard in MOVED else 0 for shard in range(limits.VIRTUAL_SHARDS))
    handed = c.ShardMapSet(2, 2, owners, (), tuple((shard, (0,)) for shard in sorted(MOVED)),
                           2, (), now_ms)
    return marked, handed


def grown_runs(*, hand_over_second: bool = True) -> list[Run]:
    """Group 0 (one group's log that grew) and group 1 (joined). `hand_over_second=False`: the
    keys handed over leave SECOND_KEY out, and group 1 makes a second job for it (planted)."""
    old = Run()
    old.h.register("east")
    old.h.register("west")
    old.submit(0, OLD, OLD_KEY, TENANT, J1)
    old.run_attempt("east", OLD, "a")
    old.run_attempt("east", OLD, "b")
    old.read(0, OLD)
    old.submit(1, SECOND, SECOND_KEY, TENANT, J3)
    old.run_attempt("west", SECOND, "y")
    marked, handed = shard_maps(old.h.now_ms)
    apply(old, marked)
    apply(old, handed)
    old.submit(2, STAY, STAY_KEY, TENANT, J3)
    old.run_attempt("west", STAY, "y")
    old.read(2, STAY)
    old.read(0, OLD)  # a job stays where it was made: read from its shard's former owner
    old.sync()

    new = Run()
    apply(new, c.GroupSet(1, 2, limits.VIRTUAL_SHARDS, new.h.now_ms, joining=True))
    new.h.register("east")
    new.h.register("west")
    apply(new, marked)
    keys = [OLD_KEY, SECOND_KEY] if hand_over_second else [OLD_KEY]
    records = tuple((TENANT, key, record.job_id, record.digest, record.created_ms)
                    for key in keys
                    for record in [old.h.state.idempotency[(TENANT, key)]])
    apply(new, c.KeysImport(1, records, new.h.now_ms))
    apply(new, handed)
    new.submit(3, NEW, NEW_KEY, TENANT, J3)
    new.run_attempt("east", NEW, "y")
    new.read(3, NEW)
    # the workload retries OLD_KEY's submit after the move: group 1 answers the imported job
    new.submit(0, keyed_id(OLD_KEY, 9), OLD_KEY, TENANT, J1, attempt=2)
    if not hand_over_second:
        new.submit(1, DUPLICATE, SECOND_KEY, TENANT, J3, attempt=2)
        new.run_attempt("west", DUPLICATE, "y")
    new.sync()
    return [old, new]


def write_grown(root: Path, runs: list[Run], *, grow: bool = True,
                events: Sequence[dict[str, Any]] = ()) -> Path:
    """The runs as `write` writes them, but as `run --grow` records them: no "group" in any
    invoke, meta "grow": true (unless `grow` is false), and `events` after the start event."""
    write(root, runs)
    records = [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]
    for record in records:
        if record["type"] == "invoke":
            del record["value"]["group"]
    records[1:1] = [dict(event) for event in events]
    for i, record in enumerate(records):
        record.update(i=i, t=round(0.25 * i, 3))
    (root / "history.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    meta = {"seed": 1, "nodes": 3, "groups": len(runs)}
    if grow:
        meta["grow"] = True
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def grow_event(value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event", "process": "grower", "f": "grow", "value": value}


def shown(report: checker.Report) -> list[str]:
    return [checker.format_violation(v) for v in report.violations]


# --- a clean run that grew ----------------------------------------------------------------------


def test_a_clean_grown_run_has_no_violations_and_finds_each_job_where_it_lives(
        tmp_path: Path) -> None:
    runs = grown_runs()
    assert set(runs[0].h.state.jobs) == {OLD, SECOND, STAY}
    assert set(runs[1].h.state.jobs) == {NEW}
    assert runs[1].h.state.idempotency[(TENANT, OLD_KEY)].job_id == OLD  # handed over
    root = write_grown(tmp_path, runs, events=[
        grow_event({"try": 1, "ok": True, "phase": "marked", "epoch": 1,
                    "moving": len(MOVES)}),
        grow_event({"try": 2, "ok": True, "phase": "done", "epoch": 2, "moved": len(MOVES),
                    "keys_imported": 2, "keys_kept": 0, "steps": []})])
    invokes = [r for r in map(json.loads, (root / "history.jsonl").read_text().splitlines())
               if r["type"] == "invoke"]
    assert invokes and all("group" not in r["value"] for r in invokes)
    report = checker.check(root)
    assert report.violations == [], shown(report)
    assert report.notes == [], report.notes
    checked = report.invariants_checked
    assert checked["job_one_group"] == 4
    assert checked["job_group_shard"] == 4  # every job's id names a shard: each judged
    assert checked["key_one_job"] == 4
    # each operation in the group whose log holds its job: group 0's submits of OLD, SECOND
    # and STAY (OLD's retry answered by group 1 included), group 1's of NEW
    assert [(g["group"], g["jobs"], g["acknowledged_jobs"], g["reads"])
            for g in report.groups] == [(0, 3, 3, 3), (1, 1, 1, 1)]
    assert report.acknowledged_jobs == 4 and report.liveness_met
    assert report.reads_compared == 4
    assert report.ops["submit"]["ok"] == 5
    assert report.grow is not None and report.grow["done"] is True
    assert report.grow["moved"] == len(MOVES) == limits.VIRTUAL_SHARDS // 2


def test_the_same_run_read_as_one_that_never_grew_puts_jobs_in_the_wrong_group(
        tmp_path: Path) -> None:
    """Without "grow" in meta.json a job's group is its shard mod 2: OLD (an odd shard) in
    group 0's log and NEW (an even one) in group 1's are where their shards never were."""
    report = checker.check(write_grown(tmp_path, grown_runs(), grow=False))
    assert "job_group_shard" in checks(report), shown(report)
    messages = {v.message for v in report.violations if v.check == "job_group_shard"}
    assert messages == {
        f"job {OLD} is in group 0's log, but its id's shard belongs to group 1",
        f"job {NEW} is in group 1's log, but its id's shard belongs to group 0"}
    assert report.grow is None


# --- a key that made two jobs across groups ------------------------------------------------------


def test_a_key_not_handed_over_that_made_a_second_job_in_the_new_group_is_a_violation(
        tmp_path: Path) -> None:
    runs = grown_runs(hand_over_second=False)
    assert runs[1].h.state.jobs[DUPLICATE].spec.idempotency_key == SECOND_KEY
    report = checker.check(write_grown(tmp_path, runs))
    assert checks(report) == {"key_one_job"}, shown(report)
    assert [v.message for v in report.violations] == [
        f"idempotency key {SECOND_KEY!r} of tenant {TENANT!r} made job {SECOND} (group 0) and "
        f"job {DUPLICATE} (group 1)"]
    assert report.invariants_checked["key_one_job"] == 5


def test_a_submit_seen_failing_whose_job_was_made_anyway_is_judged_by_its_key(
        tmp_path: Path) -> None:
    """A failed (or unknown) submit has no job id: in a run that grew it has no group either,
    so it goes to the group its (tenant, key)'s job lives in, else its shard's owner; without
    that, submit_failed_absent was never evaluated in such a run."""
    runs = grown_runs()
    key = key_where("failed", moved=False, implicit_owner=0)  # a shard group 0 kept
    job = keyed_id(key, 77)
    runs[0].submit(4, job, key, TENANT, J3, reply="fail")  # the client saw it fail...
    runs[0].h.expect(c.JobSubmit(job, _wire(J3, TENANT, key), runs[0].h.now_ms),
                     JobSubmitted)  # ...yet the log made it
    runs[0].sync()
    report = checker.check(write_grown(tmp_path, runs))
    assert checks(report) == {"submit_failed_absent"}, shown(report)
    assert report.violations[0].message.startswith("group 0: every submission of key 'failed-")


# --- the move's figures ---------------------------------------------------------------------------


def fault(kind: str, phase: str, t: float, targets: list[str]) -> dict[str, Any]:
    return {"type": "event", "process": "nemesis", "f": "fault", "t": t,
            "value": {"kind": kind, "phase": phase, "targets": targets}}


def timed(t: float, event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "t": t}


FAULTS = [
    fault("partition", "start", 1.0, ["g0r0"]), fault("partition", "end", 2.0, ["g0r0"]),
    fault("kill-leader", "start", 4.0, ["g1r0"]),  # before the mark, ends while moving
    fault("kill-leader", "end", 11.0, ["g1r0"]),
    fault("pause", "start", 12.0, ["g0r1"]),  # while moving, ends after
    fault("pause", "end", 30.0, ["g0r1"]),
    fault("clock", "start", 13.0, ["g0r2"]),  # while moving, never ends
    fault("agent-cut", "start", 20.0, ["east"]),  # after the move
    fault("agent-cut", "end", 21.0, ["east"]),
]
MARKED = timed(10.0, grow_event({"try": 2, "ok": True, "phase": "marked", "epoch": 1,
                                 "moving": 2048}))
FAILED = timed(7.0, grow_event({"try": 1, "ok": False, "error": "UNAVAILABLE",
                                "message": "no leader", "steps": []}))
DONE = timed(15.5, grow_event({"try": 3, "ok": True, "phase": "done", "epoch": 2,
                               "moved": 2048, "keys_imported": 17, "keys_kept": 1,
                               "steps": []}))


def figures(tmp_path: Path, events: list[dict[str, Any]]) -> checker.Report:
    found = _Findings(tmp_path)
    grow_figures(_History(events=sorted(events, key=lambda e: e["t"])), found)
    return found.report


def test_the_moves_figures_and_its_row_in_the_table(tmp_path: Path) -> None:
    report = figures(tmp_path, [*FAULTS, FAILED, MARKED, DONE])
    assert report.grow == {"tries": 3, "done": True, "moved": 2048, "keys_imported": 17,
                           "epoch": 2, "marked_at_s": 10.0, "done_at_s": 15.5, "held_s": 5.5,
                           "faults_while_moving": 3}
    assert report.notes == []
    table = checker.format_table(report, seed=1, nodes=3, groups=2)
    assert (f"| {GROW_ROW} | 2048 shards, 17 keys handed over, held moving 5.5 s with 3 faults "
            "active, 3 tries |") in table.splitlines()
    assert "2 groups of 3 replicas" in table


def test_a_move_that_never_finished_is_not_done(tmp_path: Path) -> None:
    report = figures(tmp_path, [*FAULTS, FAILED, MARKED])
    assert report.grow == {"tries": 2, "done": False}
    assert len(report.notes) == 1 and "did not move" in report.notes[0]
    table = checker.format_table(report, seed=1, nodes=3, groups=2)
    assert f"| {GROW_ROW} | NOT done (2 tries) |" in table.splitlines()
    assert f"note: {report.notes[0]}" in table.splitlines()


def test_a_run_that_did_not_grow_has_no_grow_row(tmp_path: Path) -> None:
    report = _Findings(tmp_path).report
    assert GROW_ROW not in checker.format_table(report, seed=1, nodes=3, groups=2)


def test_a_move_done_in_one_try_after_the_heal_has_no_hold(tmp_path: Path) -> None:
    """The mark never got through while the faults ran; the try after the heal did all three
    steps: done, with no time held moving."""
    report = figures(tmp_path, [*FAULTS, FAILED, DONE])
    assert report.grow == {"tries": 2, "done": True, "moved": 2048, "keys_imported": 17,
                           "epoch": 2}
    table = checker.format_table(report, seed=1, nodes=3, groups=2)
    assert f"| {GROW_ROW} | 2048 shards, 17 keys handed over, 2 tries |" in table.splitlines()
