"""A fake replicated log shared by simulated replicas (no network, no threads, no time).

One committed entry list; every replica has its own `State` and applied count and applies the
committed prefix at its own, seeded, possibly lagging speed. An *oracle* state applies every entry
the moment it commits: its outcomes are the reference every replica's outcomes must equal, and
observers see each committed command with its outcome (the history the checks read).

Faults, all drawn from the world's seeded rng:
- a proposal by the leader may be lost (never committed) or committed with the reply lost; in
  both cases the proposer is told the outcome is unknown, as pysyncobj does on a timeout;
- a leader change starts a new term on another replica; the old leader may keep believing it
  leads for a few steps (an isolated pysyncobj leader), its reads stale and its proposals failing;
- a lagging follower may have a snapshot of the leader's state installed
  (`snapshot.load(snapshot.dump(...))`) instead of applying the entries.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown
from raftsched.state import commands as c
from raftsched.state import fsm, invariants, snapshot
from raftsched.state.model import State
from raftsched.state.outcome import Outcome

MAX_APPLY_PER_STEP = 4
"""Entries a lagging follower applies in one step, at most."""

Observer = Callable[[int, c.Command, Outcome, State], None]
"""(log index, command, outcome, oracle state right after the apply)."""


@dataclass
class LogFaults:
    lost_proposal: float = 0.04
    """A leader's proposal is never committed; the proposer hears 'unknown'."""
    lost_reply: float = 0.04
    """A leader's proposal commits, but the proposer hears 'unknown'."""

    def quiet(self) -> None:
        self.lost_proposal = self.lost_reply = 0.0


@dataclass
class Replica:
    index: int
    state: State = field(default_factory=State)
    applied: int = 0
    """Entries applied: log positions 1..applied."""
    term: int = 1
    """The term this replica believes in."""
    deposed_steps: int = 0
    """> 0: an old leader, cut off, that still believes it leads (for this many more steps)."""
    snapshots_installed: int = 0

    @property
    def address(self) -> str:
        return f"replica-{self.index}:7000"


class SimLog:
    def __init__(self, rng: random.Random, replica_count: int = 3) -> None:
        assert replica_count >= 1
        self.rng = rng
        self.faults = LogFaults()
        self.entries: list[bytes] = []
        self.outcomes: list[Outcome] = []
        self.oracle = State()
        self.replicas = [Replica(i) for i in range(replica_count)]
        self.leader = 0
        self.term = 1
        self.observers: list[Observer] = []
        self.no_quorum_steps = 0
        """> 0: a majority of this group's replicas is unreachable for this many more steps:
        nothing commits (every proposal's outcome is unknown), reads still answer."""

    # -- commit and apply ------------------------------------------------------------------------

    def commit(self, data: bytes) -> int:
        """Append and commit one entry; the oracle applies it at once. Returns its index."""
        self.entries.append(data)
        index = len(self.entries)
        outcome = fsm.apply(self.oracle, data)
        self.outcomes.append(outcome)
        invariants.check_invariants(self.oracle)
        command = c.decode(data)
        for observer in self.observers:
            observer(index, command, outcome, self.oracle)
        return index

    def apply_through(self, replica: Replica, index: int) -> Outcome | None:
        """Apply committed entries up to `index`; the outcome of entry `index` if applied now."""
        assert index <= len(self.entries)
        outcome: Outcome | None = None
        while replica.applied < index:
            position = replica.applied
            outcome = fsm.apply(replica.state, self.entries[position])
            replica.applied += 1
            expected = self.outcomes[position]
            assert outcome == expected, (
                f"replica {replica.index} applied entry {position + 1} with outcome {outcome!r}, "
                f"the oracle with {expected!r}")
        return outcome

    def lag_step(self) -> None:
        """Each follower applies a seeded number of committed entries (maybe none)."""
        for replica in self.replicas:
            if replica.index == self.leader:
                continue
            ahead = self.rng.randint(0, MAX_APPLY_PER_STEP)
            self.apply_through(replica, min(len(self.entries), replica.applied + ahead))

    def install_snapshot(self) -> Replica | None:
        """A lagging follower gets the leader's state as a snapshot instead of entries."""
        source = self.replicas[self.leader]
        lagging = [r for r in self.replicas if r.index != self.leader and r.deposed_steps == 0
                   and r.applied < source.applied]
        if not lagging:
            return None
        target = self.rng.choice(lagging)
        target.state = snapshot.load(snapshot.dump(source.state))
        target.applied = source.applied
        target.snapshots_installed += 1
        return target

    def catch_up_all(self) -> None:
        for replica in self.replicas:
            self.apply_through(replica, len(self.entries))

    # -- leadership ------------------------------------------------------------------------------

    def change_leader(self, new_leader: int, deposed_steps: int) -> None:
        """A new term led by `new_leader`; the old leader may not notice for `deposed_steps`."""
        assert new_leader != self.leader
        old = self.replicas[self.leader]
        self.term += 1
        for replica in self.replicas:
            if replica is old and deposed_steps > 0:
                replica.deposed_steps = deposed_steps
                continue
            replica.term = self.term
            replica.deposed_steps = 0
        self.leader = new_leader

    def step(self) -> None:
        """Deposed leaders come one step closer to noticing; a lost quorum to its return."""
        if self.no_quorum_steps > 0:
            self.no_quorum_steps -= 1
        for replica in self.replicas:
            if replica.deposed_steps > 0:
                replica.deposed_steps -= 1
                if replica.deposed_steps == 0:
                    replica.term = self.term

    def heal(self) -> None:
        self.no_quorum_steps = 0
        for replica in self.replicas:
            replica.deposed_steps = 0
            replica.term = self.term
        self.faults.quiet()

    def node(self, index: int) -> SimNode:
        return SimNode(self, self.replicas[index])


class SimProposal:
    def __init__(self, node: SimNode, data: bytes) -> None:
        self._node = node
        self._data = data

    def outcome(self, timeout_s: float) -> Outcome:
        return self._node.propose(self._data, timeout_s)


class SimNode:
    """What `raftsched.replica.leader.Leader` needs of a Raft node, on one simulated replica."""

    def __init__(self, log: SimLog, replica: Replica) -> None:
        self.log = log
        self.replica = replica

    def is_leader(self) -> bool:
        return self.replica.index == self.log.leader or self.replica.deposed_steps > 0

    def term(self) -> int:
        return self.replica.term

    def leader_address(self) -> str:
        return self.log.replicas[self.log.leader].address

    def read(self, fn: Callable[[State], Any]) -> Any:
        return fn(self.replica.state)

    def submit(self, data: bytes) -> SimProposal:
        """Committed (or lost) when its outcome is asked for, as the gateway does at once."""
        if not self.is_leader():
            raise NotLeader(self.leader_address())
        return SimProposal(self, data)

    def propose(self, data: bytes, timeout_s: float) -> Outcome:
        assert timeout_s > 0
        log = self.log
        if not self.is_leader():
            raise NotLeader(self.leader_address())
        if self.replica.index != log.leader:
            raise OutcomeUnknown("isolated leader: no quorum")  # nothing commits
        if log.no_quorum_steps > 0:
            raise OutcomeUnknown("simulated: the group has no quorum")
        roll = log.rng.random()
        if roll < log.faults.lost_proposal:
            raise OutcomeUnknown("simulated: lost before commit")
        index = log.commit(data)
        outcome = log.apply_through(self.replica, index)
        assert outcome is not None
        if roll < log.faults.lost_proposal + log.faults.lost_reply:
            raise OutcomeUnknown("simulated: committed, reply lost")
        return outcome
