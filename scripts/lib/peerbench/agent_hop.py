"""The agent's own hop, in process: a slot frees (the executor hands over a completion) -> the
queued attempt's process is started, through the agent core over its real lmdb stores (synced
writes on this machine's disk), with an executor that starts nothing. Two paths of the same core:
  two writes  collect() then start_queued(): the FINISHED report's write, then the RUNNING
              record's write, then the start (how the agent did it before issue 24 item 4)
  one write   collect_and_start(): both in one transaction, then the start (what it does now)
For `scripts/bench hops`; needs raftsched's virtualenv and the repository root on sys.path.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.core import AgentCore, CoreConfig
from agent.executors import Launch
from agent.fence import FenceStore
from agent.model import (
    Assignment,
    AttemptRecord,
    Completion,
    Directives,
    Registered,
    Resources,
)
from agent.outbox import Outbox
from raftsched.clock import ManualClock
from tests.support.agent import assignment

from .stats import pct

SLOT = Resources(1000, 10, 0)
"""Each task takes the whole (one-slot) agent: every completion frees the slot for the queue."""
ROUNDS = 400


@dataclass
class StampingExecutor:
    """Starts nothing; remembers when each start was asked for."""

    started: list[float] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)

    def attempt_dir(self, fence: int) -> str:
        return f"/attempts/{fence}"

    def start(self, assignment: Assignment) -> Launch:
        self.started.append(time.perf_counter())
        return Launch(self.attempt_dir(assignment.fence), 1000 + assignment.fence)

    def adopt(self, record: AttemptRecord) -> bool:
        return False

    def kill(self, fence: int) -> bool:
        return True

    def poll(self) -> list[Completion]:
        done, self.completions = self.completions, []
        return done

    def observed_free(self) -> Resources | None:
        return None


def _task(fence: int) -> Assignment:
    return assignment(fence, task_id=f"t{fence}", resources=SLOT)


def freed_to_started_ms(one_write: bool, rounds: int = ROUNDS) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="raftsched-agent-hop-") as tmp:
        fences, outbox = FenceStore(Path(tmp) / "fence"), Outbox(Path(tmp) / "outbox")
        executor = StampingExecutor()
        core = AgentCore(CoreConfig("east", SLOT, queue_depth=1), ManualClock(), fences, outbox,
                         executor)  # type: ignore[arg-type]
        core.start()
        core.registered(Registered(2, "leader", 0, 0, ()))
        core.handle(Directives(2, (_task(1), _task(2)), ()))
        spans = []
        for fence in range(1, rounds + 1):
            executor.completions.append(Completion(fence, 0))
            freed = time.perf_counter()
            if one_write:
                core.collect_and_start()
            else:
                core.collect()
                core.start_queued()
            spans.append((executor.started[-1] - freed) * 1000)
            core.handle(Directives(2, (_task(fence + 2),), ()))  # the next queued attempt
        outbox.close()
        fences.close()
        return spans


def measure(trials: int = 3) -> dict[str, float]:
    """p50/p99 of each path, alternating them `trials` times (a shared machine drifts)."""
    spans: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(trials):
        for one_write in (False, True):
            spans[one_write] += freed_to_started_ms(one_write)
    return {"two_writes_p50_ms": pct(spans[False], 0.5),
            "two_writes_p99_ms": pct(spans[False], 0.99),
            "one_write_p50_ms": pct(spans[True], 0.5), "one_write_p99_ms": pct(spans[True], 0.99)}
