"""Task data in the seeded simulation (issue 26): the generated jobs carry templates and
for_each tasks, and every simulated task writes its own fence into its outputs, so the world's
check (`world._check_outputs`, after every step on every replica) proves that every kept output
came from the fence that succeeded, that expansions stay within their bounds, and — with the
digest comparison — that expansion and resolution are deterministic across replicas under
leader changes, lost and replayed messages and crashes."""

from __future__ import annotations

import pytest

from raftsched.protocol import ReportVerdict
from raftsched.state import reports
from raftsched.state.model import Attempt, Task
from tests.sim.test_simulation import SEEDS, STEPS, _seeded, simulate


def test_the_seeded_runs_keep_outputs_expand_for_each_and_resolve_templates() -> None:
    kept = expanded = instances = resolved = 0
    for seed in SEEDS:
        state = _seeded(seed).log.oracle
        for job in state.jobs.values():
            for task in job.tasks:
                kept += sum(1 for a in task.attempts if a.outputs is not None)
                expanded += task.instances is not None
                instances += task.instance_of >= 0
                resolved += task.resolved is not None
    print(f"kept outputs {kept}, expanded {expanded}, instances {instances}, "
          f"resolved {resolved}")
    assert kept >= 100 and expanded >= 10 and instances >= 10 and resolved >= 20


def test_the_simulation_catches_a_state_machine_that_keeps_a_late_attempts_outputs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    honest = reports._note_stale

    def keeps_late_outputs(task: Task, attempt: Attempt, report: reports.Report,
                           now_ms: int) -> ReportVerdict:
        if report.outputs:
            attempt.outputs = report.outputs  # a planted bug: a stale fence's outputs kept
        return honest(task, attempt, report, now_ms)

    monkeypatch.setattr(reports, "_note_stale", keeps_late_outputs)
    caught = []
    for seed in SEEDS:
        try:
            simulate(seed, STEPS)
        except AssertionError as error:
            caught.append(str(error).splitlines()[0])
            break
    print(caught)
    assert caught and "keeps the outputs of fence" in caught[0]
