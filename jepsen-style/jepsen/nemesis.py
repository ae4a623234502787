"""The nemesis: a seeded generator picks one fault at a time from the menu, holds it, ends it,
waits a quiet interval, and again, until the run's time is up. Every fault start and end is a
`fault` event in the history (the checker measures recovery from them).

The sequence of kinds, targets and durations comes from `random.Random(seed)` alone; which node
is "the leader" at a given moment depends on the run.

With several scheduler groups (issue 27) every replica fault (kill-*, pause-leader,
partition-leader/halves/bridge/ring, skew-replica(s)) acts on ONE group, drawn from the same
generator (its `fault` event says which: "group"); the `group` kinds take one group's quorum
away (kill-group-majority: a majority of its replicas killed; partition-group: each of its
replicas cut from every other node) while the other groups keep serving. The agent faults are
unchanged: an agent serves every group, so agent-cut cuts it from every group's replicas.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jepsen.cluster import ClusterUnderTest
from jepsen.history import History
from jepsen.hostile import HOSTILE_CLUSTER, HOSTILE_HOLD_S, HostileAgent
from raftsched.client.client import Client

KILL_KINDS = ("kill-leader", "kill-random", "kill-minority", "kill-all")
PARTITION_KINDS = ("partition-leader", "partition-halves", "partition-bridge", "partition-ring")
SKEW_KINDS = ("skew-replica", "skew-replicas", "skew-agent")
GROUP_KINDS = ("kill-group-majority", "partition-group")
"""Only with several groups: one group's quorum taken away, the others serving."""
KINDS = (*KILL_KINDS, "pause-leader", *PARTITION_KINDS, "agent-cut", "agent-kill", *SKEW_KINDS,
         "hostile-agent", *GROUP_KINDS)
AGENT_KINDS = ("agent-cut", "agent-kill", "skew-agent", "hostile-agent")
"""Faults of agents: with several groups, they are not aimed at one group."""
GROUPS = {
    "kill": KILL_KINDS,
    "pause": ("pause-leader",),
    "partition": PARTITION_KINDS,
    "agent": ("agent-cut", "agent-kill"),
    "skew": SKEW_KINDS,
    "hostile": ("hostile-agent",),
    "group": GROUP_KINDS,
    "all": KINDS,
}
HOSTILE_SEED_SALT = 0x4057
"""The hostile agent draws from its own generator (seed ^ this): its lists never shift the
schedule of the other faults."""
QUIET_S = (1.0, 3.0)
"""Uniform range of the pause between two faults."""
DOWN_S = (1.0, 3.0)
"""How long killed processes stay down."""
PAUSE_S = (2.0, 4.0)
"""SIGSTOP length: beyond the election timeout (raftsched.replica.raft.node.RAFT_MAX_TIMEOUT_S is 1
s)."""
PARTITION_S = (3.0, 6.0)
SKEW_RANGE_S = (10, 120)
"""Absolute wall-clock offset for skewed processes, either sign."""
SKEW_HOLD_S = (4.0, 8.0)
ROLLING_RESTART_GAP_S = 1.5
"""skew-replicas restarts replicas one at a time, this far apart, so a majority stays up."""
AGENT_CUT_EXTRA_S = (2.0, 4.0)
"""An agent stays cut off for the cluster's lost_after plus this."""
LEADER_LOOKUP_S = 3.0


class FaultError(ValueError):
    pass


def parse_faults(text: str, replica_count: int, groups: int = 1) -> tuple[str, ...]:
    """'kill,partition-leader,pause' -> the kinds, in menu order. Unknown names are an error
    naming the choices; a kind that cannot apply (a ring on 3 nodes, a group fault with one
    group) is an error too when named, and left out of 'all', so a run never silently tests
    less than asked."""
    chosen: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in GROUPS:
            chosen.extend(GROUPS[name])
        elif name in KINDS:
            chosen.append(name)
        else:
            raise FaultError(f"unknown fault {name!r}; choose from groups "
                             f"{', '.join(GROUPS)} or kinds {', '.join(KINDS)}")
    kinds = [k for k in KINDS if k in chosen]
    if "partition-ring" in kinds and replica_count < 5:
        if "partition-ring" in [n.strip() for n in text.split(",")]:
            raise FaultError("partition-ring needs 5 replicas (--nodes 5)")
        kinds.remove("partition-ring")
    if groups == 1 and any(k in kinds for k in GROUP_KINDS):
        named = {n.strip() for n in text.split(",")}
        if named & {*GROUP_KINDS, "group"}:
            raise FaultError(f"{', '.join(GROUP_KINDS)} need several groups (--groups 2)")
        kinds = [k for k in kinds if k not in GROUP_KINDS]
    if not kinds:
        raise FaultError("no faults chosen")
    return tuple(kinds)


def ring_links(rng: random.Random, replicas: list[str]) -> list[tuple[str, str]]:
    """Majorities ring on 5 nodes: the links to cut so that each node, on a seeded ring, sees
    only its two neighbours: every node sees a majority (itself and two others) and no two see
    the same one."""
    ring = rng.sample(replicas, len(replicas))
    n = len(ring)
    return [(ring[i], ring[(i + 2) % n]) for i in range(n)]


@dataclass
class Fault:
    kind: str
    targets: list[str]
    hold_s: float
    end: Callable[[], None]
    detail: dict[str, object]


class Nemesis:
    def __init__(self, cluster: ClusterUnderTest, history: History, kinds: tuple[str, ...],
                 seed: int, stop: threading.Event) -> None:
        self._cluster = cluster
        self._history = history
        self._kinds = kinds
        self._rng = random.Random(seed)
        self._stop = stop
        self.injected: dict[str, int] = {}
        self._thread = threading.Thread(target=self._loop, name="nemesis", daemon=True)
        self.error: BaseException | None = None
        self._seed = seed
        self._hostile: HostileAgent | None = None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._rng.uniform(*QUIET_S)):
                kind = self._rng.choice(self._kinds)
                fault = self._begin(kind)
                self.injected[kind] = self.injected.get(kind, 0) + 1
                self._history.event("nemesis", "fault", {
                    "kind": kind, "phase": "start", "targets": fault.targets,
                    "hold_s": round(fault.hold_s, 3), **fault.detail})
                self._stop.wait(fault.hold_s)
                fault.end()
                self._history.event("nemesis", "fault", {"kind": kind, "phase": "end",
                                                         "targets": fault.targets})
        except BaseException as error:  # reported by the runner; the run is then a failure
            self.error = error
            self._history.event("nemesis", "error", {"error": repr(error)})

    # -- the menu ---------------------------------------------------------------------------

    def _leader(self, group: int = 0) -> tuple[str, bool]:
        """The current leader of `group`, or a seeded random replica of it when none answers
        in time."""
        leader = self._cluster.wait_leader(LEADER_LOOKUP_S, group)
        if leader is not None:
            return leader, True
        return self._rng.choice(self._cluster.group_replicas(group)), False

    def _begin(self, kind: str) -> Fault:
        """The fault, begun; with several groups a replica fault's Fault.detail names the group
        it hit."""
        if self._cluster.groups == 1 or kind in AGENT_KINDS:
            return self._begin_in(kind, 0)
        group = self._rng.randrange(self._cluster.groups)
        fault = self._begin_in(kind, group)
        fault.detail = {**fault.detail, "group": group}
        return fault

    def _begin_in(self, kind: str, group: int) -> Fault:
        rng, cluster = self._rng, self._cluster
        replicas = cluster.group_replicas(group)
        everyone = sorted(cluster.replicas)
        agents = sorted(cluster.agents)
        majority = len(replicas) // 2 + 1
        detail: dict[str, object]
        targets: list[str]
        if kind in GROUP_KINDS:
            return self._take_quorum(kind, replicas, majority)
        if kind in KILL_KINDS:
            if kind == "kill-leader":
                leader, known = self._leader(group)
                targets, detail = [leader], {"leader_known": known}
            elif kind == "kill-random":
                targets, detail = [rng.choice(replicas)], {}
            elif kind == "kill-minority":
                targets, detail = rng.sample(replicas, len(replicas) - majority), {}
            else:
                targets, detail = list(replicas), {}
            for name in targets:
                cluster.replicas[name].kill()
            return Fault(kind, targets, rng.uniform(*DOWN_S),
                         lambda: self._restart(targets), detail)
        if kind == "pause-leader":
            leader, known = self._leader(group)
            cluster.replicas[leader].pause()
            return Fault(kind, [leader], rng.uniform(*PAUSE_S),
                         lambda: cluster.replicas[leader].resume(), {"leader_known": known})
        if kind in PARTITION_KINDS:
            groups, detail = self._partition_groups(kind, replicas, agents, group)
            links = cluster.net.partition(groups) if groups else []
            if kind == "partition-ring":
                links = ring_links(self._rng, replicas)
                cluster.net.cut_links(links)
            detail["links"] = [list(link) for link in links]
            return Fault(kind, sorted({n for link in links for n in link}),
                         rng.uniform(*PARTITION_S), cluster.net.heal, detail)
        if kind == "agent-cut":
            agent = rng.choice(agents)
            cluster.net.partition([[agent], everyone])
            hold = cluster.lost_after_s + rng.uniform(*AGENT_CUT_EXTRA_S)
            return Fault(kind, [agent], hold, cluster.net.heal, {})
        if kind == "agent-kill":
            agent = rng.choice(agents)
            cluster.agents[agent].kill()
            return Fault(kind, [agent], rng.uniform(*DOWN_S), lambda: self._restart([agent]),
                         {})
        if kind == "skew-replicas":  # every replica, so whoever leads has a wrong clock
            skews = {name: rng.choice((-1, 1)) * rng.randint(*SKEW_RANGE_S) for name in replicas}
            self._rolling_restart(skews)
            return Fault(kind, list(replicas), rng.uniform(*SKEW_HOLD_S),
                         lambda: self._rolling_restart(dict.fromkeys(replicas, 0)),
                         {"skew_s": skews})
        if kind == "hostile-agent":
            return Fault(kind, [HOSTILE_CLUSTER], rng.uniform(*HOSTILE_HOLD_S),
                         self._start_hostile(), {})
        if kind in ("skew-replica", "skew-agent"):
            name = rng.choice(replicas if kind == "skew-replica" else agents)
            skew = rng.choice((-1, 1)) * rng.randint(*SKEW_RANGE_S)
            proc = cluster.nodes[name]
            proc.kill()
            proc.start(skew_s=skew)
            return Fault(kind, [name], rng.uniform(*SKEW_HOLD_S),
                         lambda: self._restart([name]), {"skew_s": skew})
        raise FaultError(f"unknown fault kind {kind!r}")

    def _take_quorum(self, kind: str, replicas: list[str], majority: int) -> Fault:
        """A group fault: a majority of the group's replicas killed (restarted at the end), or
        each of its replicas cut from every other node (the other groups' replicas, the agents,
        each other); held PARTITION_S."""
        cluster = self._cluster
        if kind == "kill-group-majority":
            targets = self._rng.sample(replicas, majority)
            for name in targets:
                cluster.replicas[name].kill()
            return Fault(kind, sorted(targets), self._rng.uniform(*PARTITION_S),
                         lambda: self._restart(targets), {})
        others = [n for n in cluster.nodes if n not in replicas]
        links = cluster.net.partition([*([name] for name in replicas), others])
        return Fault(kind, list(replicas), self._rng.uniform(*PARTITION_S), cluster.net.heal,
                     {"links": [list(link) for link in links]})

    def _start_hostile(self) -> Callable[[], None]:
        """Start a flood; returns its end, which records what the flood did."""
        if self._hostile is None:
            cluster = self._cluster
            # with several groups: group 0's servers (the flood's target is one log)
            self._hostile = HostileAgent(cluster.group_servers(0), cluster.hostile_tls,
                                         Client(cluster.group_servers(0),
                                                tls_files=cluster.user_tls,
                                                token=cluster.admin_token, timeout_s=5.0,
                                                retry_budget_s=5.0),
                                         random.Random(self._seed ^ HOSTILE_SEED_SALT))
        hostile = self._hostile
        hostile.start()

        def end() -> None:
            self._history.event("nemesis", "hostile", hostile.stop())
            if hostile.error is not None:
                raise hostile.error

        return end

    def _partition_groups(self, kind: str, replicas: list[str], agents: list[str],
                          group: int) -> tuple[list[list[str]], dict[str, object]]:
        """The sides of a partition of `group`'s replicas (the other groups' replicas: on
        no side, untouched, but for partition-leader, which cuts the leader from every node)."""
        rng = self._rng
        if kind == "partition-leader":
            leader, known = self._leader(group)
            nodes = [*sorted(self._cluster.replicas), *agents]
            return [[leader], [n for n in nodes if n != leader]], \
                {"leader_known": known}
        if kind == "partition-halves":
            shuffled = rng.sample(replicas, len(replicas))
            minority = shuffled[:len(replicas) // 2]
            majority = shuffled[len(replicas) // 2:]
            for agent in agents:
                rng.choice((minority, majority)).append(agent)
            return [minority, majority], {}
        if kind == "partition-bridge":
            shuffled = rng.sample(replicas, len(replicas))
            half = len(replicas) // 2
            bridge = shuffled[half]
            return [shuffled[:half], shuffled[half + 1:]], {"bridge": bridge}
        return [], {}  # partition-ring: links, not groups

    def _rolling_restart(self, skews: dict[str, int]) -> None:
        for i, (name, skew) in enumerate(sorted(skews.items())):
            if i:
                time.sleep(ROLLING_RESTART_GAP_S)  # even when stopping: finish the round
            proc = self._cluster.nodes[name]
            proc.kill()
            proc.start(skew_s=skew)

    def _restart(self, names: list[str]) -> None:
        for name in names:
            proc = self._cluster.nodes[name]
            proc.kill()
            proc.start()
