"""A Register through the gateway (issue 21, findings 1 and 11): what the agent claims and the
state does not know as its cluster's comes back in `Registered.stop` and is recorded nowhere;
malformed ids and oversized lists are refused before anything is proposed; a cluster owed kills
it could not record is asked to register again once its agent catches up."""

from __future__ import annotations

import random
from typing import Any

import pytest

from raftsched import limits
from raftsched.clock import ManualClock
from raftsched.errors import Code, RaftschedError
from raftsched.protocol import (
    Beat,
    KillDirective,
    KnownAttempt,
    Registration,
    Report,
    ReportKind,
    Resources,
)
from raftsched.replica.gateway import AgentGateway
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from tests.support.memory_node import MemoryNode, make_leader

CAPACITY = Resources(4000, 1024, 0)


class RecordingNode(MemoryNode):
    """Keeps every command it applies, decoded."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[c.Command] = []

    def propose(self, data: bytes, timeout_s: float) -> Any:
        self.commands.append(c.decode(data))
        return super().propose(data, timeout_s)


def setup() -> tuple[RecordingNode, AgentGateway, dict[str, int]]:
    """East runs j/a, west runs j/b; j/c ran on east and was cancelled (the agent did not
    confirm the kill yet). Returns the fences by task."""
    node = RecordingNode()
    clock = ManualClock()
    leader = make_leader(node, clock)
    gateway = AgentGateway(node, leader, clock, random.Random(8))
    leader._round()  # takes office
    for cluster_id in ("east", "west"):
        gateway.register(Registration(cluster_id, 1, ("linux",), CAPACITY, ()))
    doc = {"name": "j", "tasks": [{"id": t, "command": ["true"], "resources": {"cpu": 1}}
                                  for t in ("a", "b")]}
    node.propose(c.encode(c.JobSubmit("j", doc_to_wire(doc), 0)), 1)
    node.propose(c.encode(c.JobSubmit("k", doc_to_wire({**doc, "name": "k"}), 0)), 1)
    node.propose(c.encode(c.AssignBatch(0, (c.Placement("j", "a", "east"),
                                            c.Placement("j", "b", "west"),
                                            c.Placement("k", "a", "east")))), 1)
    node.propose(c.encode(c.JobCancel("k", 0)), 1)
    jobs = node.state.jobs
    fences = {f"{job_id}/{task.spec.id}": task.attempts[-1].fence
              for job_id in ("j", "k") for task in jobs[job_id].tasks if task.attempts}
    return node, gateway, fences


def test_phantom_attempts_come_back_in_stop_and_are_recorded_nowhere() -> None:
    node, gateway, fences = setup()
    top = node.state.fence
    known = (KnownAttempt("j", "a", fences["j/a"], True),  # live here: resumes
             KnownAttempt("k", "a", fences["k/a"], True),  # cancelled here: a kill
             KnownAttempt("j", "b", fences["j/b"], True),  # west's: not ours
             KnownAttempt("j", "a", top + 1, True),  # an unknown fence
             KnownAttempt("ghost", "t", top + 2, True),  # an unknown job
             KnownAttempt("ghost", "u", top + 3, False))  # finished, unknown: nothing at all
    before = len(node.commands)
    registered = gateway.register(Registration("east", 2, ("linux",), CAPACITY, known))
    assert registered.stop == (KillDirective("j", "b", fences["j/b"]),
                               KillDirective("j", "a", top + 1),
                               KillDirective("ghost", "t", top + 2))
    assert (registered.lost, registered.kills) == (0, 0)  # the cancel had recorded the kill
    [entry] = node.commands[before:]
    assert isinstance(entry, c.ClusterRegister)
    assert entry.known == known[:2]  # only what the state knows for east reaches the log
    assert node.state.clusters["east"].kills == {fences["k/a"]: ("k", "a")}
    assert node.state.clusters["west"].kills == {}
    assert node.state.kill_count == 1


@pytest.mark.parametrize(("cluster_id", "capabilities", "field"), [
    ("", ("linux",), "cluster_id: must use only letters"),
    ("east\n", ("linux",), "cluster_id: must use only"),
    ("east", ("linux", "\x1b[31mred"), "capabilities[1]: must use only"),
    ("east", ("gpu\x00",), "capabilities[0]: must use only"),
])
def test_a_bad_cluster_id_or_capability_is_refused_before_anything_is_proposed(
        cluster_id: str, capabilities: tuple[str, ...], field: str) -> None:
    node, gateway, _ = setup()
    before = len(node.commands)
    with pytest.raises(RaftschedError) as refused:
        gateway.register(Registration(cluster_id, 2, capabilities, CAPACITY, ()))
    assert refused.value.code == Code.INVALID_ARGUMENT and field in refused.value.message
    assert len(node.commands) == before
    assert node.state.clusters["east"].capabilities == frozenset({"linux"})


def test_more_known_attempts_than_a_register_may_list_is_refused_before_proposing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node, gateway, _ = setup()
    monkeypatch.setattr(limits, "MAX_REGISTER_KNOWN_ATTEMPTS", 3)
    before = len(node.commands)
    known = tuple(KnownAttempt("ghost", "t", fence, True) for fence in range(1000, 1004))
    with pytest.raises(RaftschedError) as refused:
        gateway.register(Registration("east", 2, ("linux",), CAPACITY, known))
    assert refused.value.code == Code.RESOURCE_EXHAUSTED
    assert "MAX_REGISTER_KNOWN_ATTEMPTS=3" in refused.value.message
    assert len(node.commands) == before
    assert gateway.register(Registration("east", 2, ("linux",), CAPACITY, known[:3])).stop


def test_a_long_list_is_split_in_reads_of_bounded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    node, gateway, _ = setup()
    reads: list[int] = []
    read = node.read

    def counted(fn: Any) -> Any:
        reads.append(1)
        return read(fn)

    monkeypatch.setattr(node, "read", counted)
    known = tuple(KnownAttempt("ghost", "t", fence, True)
                  for fence in range(10_000, 10_000 + 2 * limits.MAX_BATCH_ITEMS + 1))
    registered = gateway.register(Registration("east", 2, ("linux",), CAPACITY, known))
    assert len(registered.stop) == len(known)
    assert len(reads) >= 3  # three chunks (and the incarnation's read)


def test_a_cluster_owed_unrecorded_kills_is_asked_to_register_once_its_backlog_halves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node, gateway, fences = setup()
    monkeypatch.setattr(limits, "MAX_KILL_DIRECTIVES_PER_CLUSTER", 1)
    node.propose(c.encode(c.JobCancel("j", 0)), 1)  # j/a's kill does not fit east's bound
    east = node.state.clusters["east"]
    assert east.kills == {fences["k/a"]: ("k", "a")} and east.kills_unrecorded == 1
    beat = Beat("east", 1, 1, CAPACITY, (), 0)
    assert not gateway.heartbeat(beat).reregister  # still 1 pending: not below half of 1
    gateway.report("east", 1, [Report(ReportKind.KILLED, "k", "a", fences["k/a"])])
    assert gateway.heartbeat(Beat("east", 1, 2, CAPACITY, (), 0)).reregister
    registered = gateway.register(Registration(
        "east", 1, ("linux",), CAPACITY, (KnownAttempt("j", "a", fences["j/a"], True),)))
    assert registered.kills == 1 and registered.stop == ()
    assert (east.kills, east.kills_unrecorded) == ({fences["j/a"]: ("j", "a")}, 0)
    assert not gateway.heartbeat(Beat("east", 1, 1, CAPACITY, (), 0)).reregister
