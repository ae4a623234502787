"""`MockExecutor`: pretends to run attempts (argv 'mock sleep_ms=N exit=K fail_attempts=M'), for
tests and benchmarks."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.executors.base import (
    ATTEMPT_DIR_DIGITS,
    MOCK_BAD_ARGUMENT_EXIT_CODE,
    MOCK_CLOSE_TIMEOUT_MS,
    MOCK_IDLE_WAIT_MS,
    MOCK_KEYS,
    VANISHED_EXIT_CODE,
    ExecutorError,
    Launch,
)
from agent.model import Assignment, AttemptRecord, Completion, Resources
from raftsched import limits


@dataclass(frozen=True, slots=True)
class MockPlan:
    """What a mock attempt does: wait `sleep_ms`, then end with `exit_code` (None + timed_out
    when the task's timeout is shorter)."""

    sleep_ms: int
    exit_code: int | None
    timed_out: bool
    reason: str




def mock_plan(assignment: Assignment) -> MockPlan:
    """`["mock", "sleep_ms=N", "exit=K", "fail_attempts=M"]` (any subset, defaults 0): exit 1
    while the attempt number is <= M, then exit K. Any argv not starting with "mock" succeeds at
    once; a "mock" argv with an unknown or malformed argument exits 2 at once."""
    argv = assignment.command
    if not argv or argv[0] != "mock":
        return MockPlan(0, 0, False, "")
    values = dict.fromkeys(MOCK_KEYS, 0)
    for argument in argv[1:]:
        name, _, value = argument.partition("=")
        if name not in values or not value.lstrip("-").isdigit():
            return MockPlan(0, MOCK_BAD_ARGUMENT_EXIT_CODE, False,
                            f"bad mock argument {argument!r}")
        values[name] = int(value)
    exit_code = 1 if assignment.attempt <= values["fail_attempts"] else values["exit"]
    sleep_ms = max(0, values["sleep_ms"])
    if 0 < assignment.timeout_ms < sleep_ms:
        return MockPlan(assignment.timeout_ms, None, True,
                        f"timed out after {assignment.timeout_ms} ms")
    return MockPlan(sleep_ms, exit_code, False, "" if exit_code == 0 else f"exit code {exit_code}")


class MockExecutor:
    """No processes: one timer thread completes attempts as their plans say. An attempt lives
    as long as this object, so a test that "restarts" an agent hands the same executor to the
    new agent, as a real wrapper outlives a real agent."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._condition = threading.Condition()
        self._due: list[tuple[float, int, Completion]] = []  # (monotonic s, fence, completion)
        self._pending: dict[int, Completion] = {}   # fence -> what it will end with
        self._done: list[Completion] = []
        self._listeners: list[Callable[[], None]] = []
        self._closed = False
        self.started: list[int] = []
        """Fences in the order they were started (tests check nothing runs twice)."""
        self._thread = threading.Thread(target=self._run, name="mock-executor", daemon=True)
        self._thread.start()

    def attempt_dir(self, fence: int) -> str:
        return "" if self._root is None else str(self._root / f"{fence:0{ATTEMPT_DIR_DIGITS}d}")

    def start(self, assignment: Assignment) -> Launch:
        plan = mock_plan(assignment)
        completion = Completion(assignment.fence, plan.exit_code, plan.timed_out, False,
                                plan.reason)
        with self._condition:
            if self._closed:
                raise ExecutorError("executor closed")
            if len(self._pending) >= limits.MAX_RUNNING_ATTEMPTS:
                raise ExecutorError(f"{limits.MAX_RUNNING_ATTEMPTS} attempts already running")
            if assignment.fence in self._pending:
                raise ExecutorError(f"fence {assignment.fence} is already running")
            self.started.append(assignment.fence)
            self._pending[assignment.fence] = completion
            heapq.heappush(self._due, (time.monotonic() + plan.sleep_ms / 1000,
                                       assignment.fence, completion))
            self._condition.notify_all()
        return Launch(self.attempt_dir(assignment.fence))

    def adopt(self, record: AttemptRecord) -> bool:
        with self._condition:
            known = record.fence in self._pending or any(
                c.fence == record.fence for c in self._done)
            if not known:
                self._done.append(Completion(record.fence, VANISHED_EXIT_CODE,
                                             reason="mock attempt lost with its executor"))
        self._notify()
        return True

    def kill(self, fence: int) -> bool:
        with self._condition:
            if self._pending.pop(fence, None) is None:
                return False
            self._done.append(Completion(fence, None, killed=True, reason="killed"))
        self._notify()
        return True

    def poll(self) -> list[Completion]:
        with self._condition:
            done, self._done = self._done, []
        return done

    def running(self) -> list[int]:
        with self._condition:
            return sorted(self._pending)

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._condition:
            self._listeners.append(listener)

    def observed_free(self) -> Resources | None:
        return None

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        self._thread.join(timeout=MOCK_CLOSE_TIMEOUT_MS / 1000)

    def _run(self) -> None:
        while True:
            with self._condition:
                if self._closed:
                    return
                now = time.monotonic()
                fired = False
                while self._due and self._due[0][0] <= now:
                    _, fence, completion = heapq.heappop(self._due)
                    if self._pending.get(fence) is completion:  # not killed meanwhile
                        del self._pending[fence]
                        self._done.append(completion)
                        fired = True
                wait_s = self._due[0][0] - now if self._due else MOCK_IDLE_WAIT_MS / 1000
                if not fired:
                    self._condition.wait(timeout=min(wait_s, MOCK_IDLE_WAIT_MS / 1000))
                    continue
            self._notify()

    def _notify(self) -> None:
        with self._condition:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
