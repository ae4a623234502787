"""The "hostile-agent" fault: an authenticated agent that lies (issue 21, finding 1).

It holds a real certificate for a cluster of its own (HOSTILE_CLUSTER, issued by the run's CA
like every agent's) and, while the fault lasts, registers again and again, each time claiming
running attempts no scheduler placed on it: random fences under made-up jobs, real job and task
ids with fences near theirs, and other clusters' real attempts (read with ListTasks) — one entry
up to MAX_REGISTER_KNOWN_ATTEMPTS at a time, and now and then one more than that. It advertises
no capacity and no capability, so no task is ever placed on it, and it never heartbeats or
reports (the scheduler marks it SUSPECT, then LOST, until its next registration).

What it must not achieve, the checker says: `hostile_no_kills` (its cluster never holds a kill
directive: it had no attempt) and `kill_liveness` (every kill owed to an honest agent is settled
in time, whatever the hostile one does).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent.session import GrpcSession, SessionError
from raftsched import limits
from raftsched.client.client import Client
from raftsched.errors import RaftschedError
from raftsched.protocol import KnownAttempt, Registration, Resources
from raftsched.tls import TlsFiles

HOSTILE_CLUSTER = "hostile"
"""The hostile agent's own cluster id (its certificate names it)."""
HOSTILE_HOLD_S = (4.0, 8.0)
"""How long one hostile-agent fault floods."""
SIZES = (1, 100, 10_000, limits.MAX_REGISTER_KNOWN_ATTEMPTS,
         limits.MAX_REGISTER_KNOWN_ATTEMPTS + 1)
SIZE_WEIGHTS = (2, 2, 8, 1, 1)
"""How many attempts one Register claims: mostly the probe's 10,000, sometimes the most one may
list, and sometimes one more (which must be refused before anything is proposed). Every list is
drawn afresh, so the phantoms never repeat: the old global bound of a million kill directives
filled within a few floods."""
REAL_JOBS = 10
"""Recent jobs whose tasks (ids and real fences, on honest clusters) it claims as its own."""
PAUSE_S = 0.02
"""Between two Registers: a flood, not a spin that starves the harness's own clients."""
CALL_TIMEOUT_S = 10.0


@dataclass
class Flood:
    """What one fault's flood did, for the history."""

    registers: int = 0
    claimed: int = 0
    told_to_stop: int = 0
    """Entries the scheduler answered in `Registered.stop` ("not ours, stop it")."""
    kills_recorded: int = 0
    """`Registered.kills` summed: kill directives a Register recorded (must stay 0)."""
    refused: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {"cluster": HOSTILE_CLUSTER, "registers": self.registers,
                "claimed": self.claimed, "told_to_stop": self.told_to_stop,
                "kills_recorded": self.kills_recorded, "refused": dict(self.refused)}


class HostileAgent:
    """One flood at a time: `start` it, `stop` it (joins, returns the flood's summary). The
    incarnation grows across floods, as a real agent's would."""

    def __init__(self, servers: list[str], tls_files: TlsFiles | None,
                 client: Client, rng: random.Random) -> None:
        self._servers = servers
        self._tls = tls_files
        self._client = client
        self._rng = rng
        self._incarnation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flood = Flood()
        self.error: BaseException | None = None

    def start(self) -> None:
        self._stop.clear()
        self._flood = Flood()
        self._thread = threading.Thread(target=self._run, name="hostile-agent", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CALL_TIMEOUT_S * 3)
        return self._flood.summary()

    def _run(self) -> None:
        session = GrpcSession(self._servers, stop=self._stop, tls_files=self._tls,
                              register_deadline_ms=int(CALL_TIMEOUT_S * 1000))
        try:
            real = self._real_attempts()
            while not self._stop.wait(PAUSE_S):
                size = self._rng.choices(SIZES, SIZE_WEIGHTS)[0]
                self._register(session, self._claims(real, size))
        except BaseException as error:  # the nemesis reports it; the run is then a failure
            self.error = error
        finally:
            session.close()

    def _register(self, session: GrpcSession, known: tuple[KnownAttempt, ...]) -> None:
        self._incarnation += 1
        flood = self._flood
        flood.registers += 1
        flood.claimed += len(known)
        try:
            registered = session.register(Registration(
                HOSTILE_CLUSTER, self._incarnation, (), Resources(), known))
        except SessionError as error:
            flood.refused[f"{type(error).__name__}: {str(error)[:60]}"] += 1
            return
        flood.told_to_stop += len(registered.stop)
        flood.kills_recorded += registered.kills

    def _claims(self, real: list[KnownAttempt], size: int) -> tuple[KnownAttempt, ...]:
        """`size` running attempts: other clusters' real ones first, then, drawn afresh, real
        tasks with fences near theirs and made-up jobs with random fences."""
        claims = real[:size]
        rng = self._rng
        while len(claims) < size:
            if real and rng.random() < 0.1:
                near = rng.choice(real)
                claims.append(KnownAttempt(near.job_id, near.task_id,
                                           near.fence + rng.randrange(1, 1_000), True))
            else:
                claims.append(KnownAttempt(f"phantom-{rng.randrange(10**9)}", "t0",
                                           rng.randrange(1, 2**62), True))
        return tuple(claims)

    def _real_attempts(self) -> list[KnownAttempt]:
        """The current attempts of recent jobs' tasks (on honest clusters), as running."""
        found: list[KnownAttempt] = []
        try:
            for job in list(self._client.list_jobs(limit=REAL_JOBS).jobs):
                for task in self._client.list_tasks(job.job_id).tasks:
                    if task.fence:
                        found.append(KnownAttempt(job.job_id, task.task_id, task.fence, True))
        except RaftschedError:
            pass  # an election: phantoms alone will do
        return found
