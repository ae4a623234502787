"""`run --grow`: the deployment gets a scheduler group while the workload and the nemesis run
(docs/scale-out.md §5). The cluster starts its last group with `--joining`; at a seeded moment
the grower marks the moving shards in every group (step 1 of `raftsched admin groups add`),
holds the move open for a seeded few seconds (the workload's submits of those shards wait,
the faults go on), then finishes it with `raftsched.client.shards.add_group`, as an operator
re-running an interrupted command would. Every failure (a group without a quorum, a partition,
a leader change) is followed by another try until the move is done: every step is idempotent,
and the apply rules are what keep one owner per shard whatever the faults do to the steps'
entries. After the heal it finishes a move the faults kept from finishing. Each try is a
history event ("grow": phase "marked" or "done", or its error), which the table reports."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from jepsen.cluster import ClusterUnderTest
from jepsen.history import History
from raftsched.client.client import Client
from raftsched.client.shards import MapView, MoveReport, add_group, copy_policy, marked
from raftsched.errors import RaftschedError

GROW_AT = (0.15, 0.45)
"""The grower starts within this share of the run's time (seeded)."""
GROW_RETRY_S = 1.0
"""After a failed try, the grower tries again this much later."""
GROW_CALL_TIMEOUT_S = 3.0
GROW_RETRY_BUDGET_S = 5.0
"""Each call of a try: its deadline and its retry budget (a try fails fast under a fault)."""
GROW_FINISH_TIMEOUT_S = 90.0
"""After the heal, a move not yet done gets this long to finish."""
GROW_HOLD_S = (2.0, 6.0)
"""Between marking the shards and finishing the move (seeded)."""


class Grower:
    def __init__(self, cluster: ClusterUnderTest, history: History, seed: int, run_s: float,
                 stop: threading.Event) -> None:
        self._cluster, self._history, self._stop = cluster, history, stop
        rng = random.Random(seed * 7_919 + 13)
        self._at_s = rng.uniform(*GROW_AT) * run_s
        self._hold_s = rng.uniform(*GROW_HOLD_S)
        self.tries = 0
        self.marked = False
        self.done = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="grower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            if self._stop.wait(self._at_s):
                return
            while not self.marked and not self._stop.is_set():
                if not self._try(mark_only=True) and self._stop.wait(GROW_RETRY_S):
                    return
            if self._stop.wait(self._hold_s):
                return
            while not self.done and not self._stop.is_set():
                if not self._try() and self._stop.wait(GROW_RETRY_S):
                    return
        except BaseException as error:  # the runner reports it; the run then fails
            self.error = error

    def finish(self) -> None:
        """After the heal: try until the move is done (bounded by GROW_FINISH_TIMEOUT_S)."""
        deadline = time.monotonic() + GROW_FINISH_TIMEOUT_S
        while not self.done and time.monotonic() < deadline:
            if not self._try():
                time.sleep(GROW_RETRY_S)

    def _try(self, mark_only: bool = False) -> bool:
        cluster = self._cluster
        servers = [cluster.group_servers(g) for g in range(cluster.groups)]
        clients = [Client(group, timeout_s=GROW_CALL_TIMEOUT_S,
                          retry_budget_s=GROW_RETRY_BUDGET_S, tls_files=cluster.user_tls,
                          token=cluster.admin_token) for group in servers]
        self.tries += 1
        steps: list[str] = []
        try:
            value = _mark(clients, servers) if mark_only else _finish(clients, servers, steps)
        except RaftschedError as error:
            self._history.event("grower", "grow", {"try": self.tries, "ok": False,
                                                   "error": error.code.value,
                                                   "message": error.message, "steps": steps})
            return False
        finally:
            for client in clients:
                client.close()
        self.marked = True
        self.done = not mark_only
        self._history.event("grower", "grow", {"try": self.tries, "ok": True, **value})
        return True


def _mark(clients: list[Client], servers: list[list[str]]) -> dict[str, Any]:
    """Step 1 alone, in every group: the newest map any group holds with the balancing moves
    marked (or, after a try that marked some groups only, that marked map)."""
    copy_policy(clients[0], clients[-1], MoveReport())  # as add_group does first
    views = [MapView.of(client.topology()) for client in clients]
    newest = max((v for v in views if v.owners), key=lambda v: v.epoch)
    step1 = newest if newest.moving else marked(newest, len(clients))
    for client in clients:
        client.set_shard_map(step1.request(servers))
    return {"phase": "marked", "epoch": step1.epoch, "moving": len(step1.moving)}


def _finish(clients: list[Client], servers: list[list[str]], steps: list[str]) -> dict[str, Any]:
    report = add_group(clients, servers, steps.append)
    return {"phase": "done", "epoch": report.epoch, "moved": report.moved,
            "keys_imported": report.keys_imported, "keys_kept": report.keys_kept,
            "steps": steps}
