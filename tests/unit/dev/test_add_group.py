"""`raftsched dev add-group` (raftsched.dev.add_group) without a cluster: its pure helpers, the
record's joining group, and the command driven with stand-in processes (`sleep`), a fake
cluster that answers from what was spawned, and fake calls (drains, the move)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from agent.metrics import AgentMetrics
from raftsched import procfs
from raftsched.client.shards import MoveReport
from raftsched.dev import add_group as dev_add_group
from raftsched.dev import down as dev_down
from raftsched.dev import record
from raftsched.dev import status as dev_status
from raftsched.dev import supervisor as sv
from raftsched.dev.add_group import (
    AddGroupOptions,
    agents_to_restart,
    group_to_add,
    new_replica_names,
)
from raftsched.dev.group_calls import DRAIN_REASON, AgentWork, agent_work
from raftsched.dev.processes import ClusterFacts, ClusterView, topology_text
from raftsched.dev.record import (
    AgentEntry,
    ClusterState,
    DevClusterError,
    ReplicaEntry,
    TlsPaths,
)
from raftsched.errors import Code, RaftschedError
from tests.unit.dev.test_cluster import NO_TOKEN, Stand, sample_state

# --- pure helpers -------------------------------------------------------------------------------


def test_new_replica_names_go_on_from_the_recorded_ones_and_skip_taken_names() -> None:
    assert new_replica_names(3, {"replica-1", "replica-2", "replica-3"}, 4) == [
        "replica-4", "replica-5", "replica-6"]
    assert new_replica_names(2, {"replica-4", "replica-6"}, 4) == ["replica-5", "replica-7"]


def test_topology_text_is_what_replica_topology_and_agent_servers_take() -> None:
    assert topology_text([["a:1", "b:2"], ["c:3"]]) == "a:1,b:2;c:3"
    assert topology_text([["a:1"]]) == "a:1"


def test_agent_work_reads_an_agents_own_metrics_page() -> None:
    metrics = AgentMetrics()
    page = generate_latest(metrics.registry).decode()
    assert agent_work(page) == AgentWork(0, 0, 0) and AgentWork(0, 0, 0).idle
    metrics.attempts_running.set(2)
    metrics.reports_pending.set(1)
    work = agent_work(generate_latest(metrics.registry).decode())
    assert work == AgentWork(2, 0, 1) and not work.idle


@pytest.mark.parametrize("page", ["", "raftsched_agent_attempts_running 0\n", "{{{ not metrics"])
def test_agent_work_is_none_without_every_gauge(page: str) -> None:
    assert agent_work(page) is None


def grouped_state(directory: Path, groups: int, joining: bool = False) -> ClusterState:
    """`groups` groups of one replica each (the last joining, if asked); processes of this
    test process (alive), so that the cluster counts as running."""
    state = sample_state(directory)
    ticks = procfs.start_ticks(os.getpid())
    assert ticks is not None
    state.replicas = [ReplicaEntry(f"replica-{g + 1}", os.getpid(), ticks,
                                   f"127.0.0.1:{5001 + g}", f"127.0.0.1:{6001 + g}", 0,
                                   f"/d/r{g}", f"/d/l{g}", g, joining and g == groups - 1)
                      for g in range(groups)]
    return state


def test_the_group_to_add_is_the_next_one_or_the_joining_one(tmp_path: Path) -> None:
    assert group_to_add(grouped_state(tmp_path, 1)) == (1, False)
    assert group_to_add(grouped_state(tmp_path, 2, joining=True)) == (1, True)
    with pytest.raises(DevClusterError) as caught:
        group_to_add(grouped_state(tmp_path, record.MAX_DEV_GROUPS))
    assert caught.value.code is Code.RESOURCE_EXHAUSTED
    assert "has 4 scheduler groups already (MAX_DEV_GROUPS)" in caught.value.message


def test_a_cluster_without_a_quorum_somewhere_is_refused_naming_the_group(tmp_path: Path) -> None:
    state = grouped_state(tmp_path, 2, joining=True)
    state.replicas[1] = ReplicaEntry("replica-2", 1, 1, "127.0.0.1:5002", "127.0.0.1:6002", 0,
                                     "/d", "/d/l", 1, True)  # not this process: dead
    with pytest.raises(DevClusterError) as caught:
        group_to_add(state)
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert caught.value.message.startswith("group 1 of the dev cluster")
    assert "an earlier 'dev add-group' started it" in caught.value.message


# --- the record: a joining group, the groups an agent serves ------------------------------------


def test_a_joining_group_is_recorded_but_not_given_to_clients(tmp_path: Path) -> None:
    state = grouped_state(tmp_path, 2, joining=True)
    record.save_state(state)
    assert record.load_state(tmp_path) == state
    assert state.all_groups == [["127.0.0.1:5001"], ["127.0.0.1:5002"]]
    assert (state.joining_group, state.client_groups, state.groups) == (
        1, [["127.0.0.1:5001"]], None)
    assert record.groups_from_state(tmp_path) == [["127.0.0.1:5001"]]
    assert record.servers_from_state(tmp_path) == ["127.0.0.1:5001"]
    assert len(state.processes()) == 3  # `dev down` stops it with the rest
    document = dev_status.cluster_doc(state, None)
    assert (document["groups"], document["joining_group"]) == ([["127.0.0.1:5001"]], 1)
    assert [r["joining"] for r in document["replicas"]] == [False, True]


def test_a_state_file_from_before_add_group_still_loads(tmp_path: Path) -> None:
    document = grouped_state(tmp_path, 2).to_doc()
    for replica in document["replicas"]:
        del replica["joining"]
    del document["agents"][0]["groups"]
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    state = record.load_state(tmp_path)
    assert state is not None and state.joining_group is None
    assert state.agents[0].groups == 0 and state.served_groups(state.agents[0]) == 2
    assert agents_to_restart(state, 2) == [] and agents_to_restart(state, 3) == state.agents


# --- add-group with stand-in processes ----------------------------------------------------------


class FakeCluster(Stand):
    """`Stand`'s processes; `probe` answers as every group's leader: each agent spawned so far
    READY, holding nothing, its incarnation the number of times it was spawned."""

    def __init__(self, children: list[sv.Child]) -> None:
        super().__init__(children)
        self.spawns: dict[str, int] = {}

    def spawn(self, name: str, argv: list[str], log: Path, cwd: Path,
              env: Mapping[str, str] | None = None) -> sv.Child:
        self.spawns[name] = self.spawns.get(name, 0) + 1
        return super().spawn(name, argv, log, cwd, env)

    def probe(self, servers: Sequence[str], tls: TlsPaths | None) -> ClusterView | None:
        agents = [name for name, argv in self.argvs.items() if "agent" in argv[2:4]]
        return ClusterView(servers[0], 1, servers[0], {name: "READY" for name in agents},
                           from_leader=True,
                           facts={name: ClusterFacts(incarnation=self.spawns[name])
                                  for name in agents})


class FakeCalls:
    """`GroupCalls` that note what was asked; `fail_move` makes the move fail once."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []
        self.fail_move = False

    def recorded(self, servers: Sequence[str]) -> bool:
        return True

    def drain(self, servers: Sequence[str], cluster: str, drain: bool) -> None:
        self.asked.append(("drain" if drain else "undrain", cluster, tuple(servers)))

    def agent_work(self, metrics_port: int) -> AgentWork | None:
        return AgentWork(0, 0, 0)

    def move(self, groups: Sequence[Sequence[str]], say: Any,
             allow_no_clusters: bool) -> MoveReport:
        self.asked.append(("move", len(groups), allow_no_clusters))
        if self.fail_move:
            self.fail_move = False
            raise RaftschedError(Code.UNAVAILABLE, "group 1: no leader (run the command again "
                                 "to finish the move)")
        say("step 1/3")
        return MoveReport(groups=len(groups), epoch=2, moved=2048, keys_imported=3)


@pytest.fixture
def cluster(children: list[sv.Child]) -> FakeCluster:
    return FakeCluster(children)


def up(cluster: FakeCluster, directory: Path, **options: Any) -> ClusterState:
    from raftsched.dev import up as dev_up

    state, _ = dev_up.up(dev_up.UpOptions(directory, **options), progress=lambda m: None,
                         spawn=cluster.spawn, probe=cluster.probe, sleep=lambda s: None,
                         web_ready=lambda address: True, web_token=NO_TOKEN)
    return state


def add(cluster: FakeCluster, directory: Path, calls: FakeCalls,
        messages: list[str] | None = None) -> dev_add_group.AddGroupResult:
    return dev_add_group.add_group(AddGroupOptions(directory, timeout_s=5),
                                   progress=(messages if messages is not None else []).append,
                                   spawn=cluster.spawn, probe=cluster.probe, calls=calls,
                                   sleep=lambda s: None)


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_add_group_starts_the_group_restarts_every_agent_and_moves(
        cluster: FakeCluster, tmp_path: Path) -> None:
    before = up(cluster, tmp_path)
    calls, messages = FakeCalls(), list[str]()
    result = add(cluster, tmp_path, calls, messages)
    state = result.state
    assert (result.group, result.resumed, result.restarted) == (1, False,
                                                               ("cpu-east", "gpu-west"))
    assert result.report.epoch == 2 and "step 1/3" in messages
    new = [r for r in state.replicas if r.group == 1]
    assert [r.id for r in new] == ["replica-4", "replica-5", "replica-6"]
    assert not any(r.joining for r in state.replicas) and state.joining_group is None
    assert record.load_state(tmp_path) == state
    assert state.client_groups == [before.servers, [r.grpc_address for r in new]]
    replica = cluster.argvs["replica-4"]
    assert (option(replica, "--group"), option(replica, "--groups")) == ("1", "2")
    assert "--joining" in replica and option(replica, "--topology") == topology_text(
        state.client_groups)
    assert option(replica, "--tls-cert") == str(tmp_path / "tls" / "replica.pem")
    assert option(replica, "--secret-file") == before.secret_file
    for agent in state.agents:
        argv = cluster.argvs[agent.cluster]
        assert option(argv, "--servers") == topology_text(state.client_groups)
        assert option(argv, "--data-dir") == agent.data_dir and agent.groups == 2
        assert option(argv, "--tls-cert") == str(tmp_path / "tls" / f"agent-{agent.cluster}.pem")
        assert cluster.spawns[agent.cluster] == 2 and sv.Identity(
            agent.pid, agent.start_time_ticks).is_running()
    old = before.servers
    assert calls.asked == [("drain", "cpu-east", tuple(old)), ("undrain", "cpu-east", tuple(old)),
                           ("drain", "gpu-west", tuple(old)), ("undrain", "gpu-west", tuple(old)),
                           ("move", 2, False)]
    results = dev_down.down(tmp_path)
    assert results is not None and {r.name for r in results} >= {"replica-4", "replica-6"}
    assert all(r.outcome is sv.StopOutcome.STOPPED for r in results)


def test_a_group_that_does_not_start_is_stopped_and_forgotten(
        cluster: FakeCluster, tmp_path: Path) -> None:
    before = up(cluster, tmp_path)
    cluster.failing.add("replica-5")
    with pytest.raises(DevClusterError) as caught:
        add(cluster, tmp_path, FakeCalls())
    assert caught.value.message.startswith("replica-5 (pid ")
    assert caught.value.log == str(tmp_path / "logs" / "replica-5.log")
    assert record.load_state(tmp_path) == before
    new = [c for c in cluster.children if c.name in ("replica-4", "replica-5", "replica-6")]
    assert new and all(child.poll() is not None for child in new)
    cluster.failing.clear()
    again = add(cluster, tmp_path, FakeCalls())  # their data dirs are an earlier run's
    assert [r.id for r in again.state.replicas if r.group == 1] == [
        "replica-7", "replica-8", "replica-9"]
    dev_down.down(tmp_path)


def test_a_move_that_stops_is_finished_by_running_the_command_again(
        cluster: FakeCluster, tmp_path: Path) -> None:
    up(cluster, tmp_path)
    calls = FakeCalls()
    calls.fail_move = True
    with pytest.raises(DevClusterError) as caught:
        add(cluster, tmp_path, calls)
    assert caught.value.code is Code.UNAVAILABLE
    assert caught.value.message.startswith("the shard move: group 1: no leader")
    assert "finish with 'raftsched dev add-group --dir" in caught.value.message
    state = record.load_state(tmp_path)
    assert state is not None and state.joining_group == 1  # recorded, running, not a client's
    assert len(state.client_groups) == 1 and all(a.groups == 2 for a in state.agents)
    calls.asked.clear()
    result = add(cluster, tmp_path, calls)
    assert (result.group, result.resumed, result.restarted) == (1, True, ())
    assert calls.asked == [("move", 2, False)] and result.state.joining_group is None
    dev_down.down(tmp_path)


def test_a_drain_left_by_a_stopped_run_is_lifted_and_someone_elses_stays(
        cluster: FakeCluster, tmp_path: Path) -> None:
    up(cluster, tmp_path)
    reasons = {"cpu-east": DRAIN_REASON, "gpu-west": "maintenance"}

    def probe(servers: Sequence[str], tls: TlsPaths | None) -> ClusterView | None:
        view = cluster.probe(servers, tls)
        assert view is not None
        facts = {name: ClusterFacts(f.incarnation, 0, True, reasons[name])
                 for name, f in view.facts.items()}
        return ClusterView(view.leader, 1, view.responder, view.clusters, True, facts)

    calls = FakeCalls()
    dev_add_group.add_group(AddGroupOptions(tmp_path, timeout_s=5), progress=lambda m: None,
                            spawn=cluster.spawn, probe=probe, calls=calls, sleep=lambda s: None)
    # cpu-east: drained by an earlier run, lifted; gpu-west: someone else's drain, kept
    assert [asked[:2] for asked in calls.asked] == [("undrain", "cpu-east"), ("move", 2)]
    dev_down.down(tmp_path)


def test_a_cluster_without_agents_grows_plaintext_and_moves_without_a_ready_cluster(
        cluster: FakeCluster, tmp_path: Path) -> None:
    up(cluster, tmp_path, agents=0, insecure=True)
    calls = FakeCalls()
    result = add(cluster, tmp_path, calls)
    assert calls.asked == [("move", 2, True)] and result.restarted == ()
    replica = cluster.argvs["replica-4"]
    assert "--insecure-dev" in replica and "--secret-file" not in replica
    dev_down.down(tmp_path)


def test_add_group_refuses_without_a_running_cluster(cluster: FakeCluster,
                                                     tmp_path: Path) -> None:
    with pytest.raises(DevClusterError) as caught:
        add(cluster, tmp_path, FakeCalls())
    assert caught.value.code is Code.NOT_FOUND and not (tmp_path / "cluster.json").exists()
    state = sample_state(tmp_path)  # recorded, but its processes are gone
    record.save_state(state)
    with pytest.raises(DevClusterError) as caught:
        add(cluster, tmp_path, FakeCalls())
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert "too few to elect a leader" in caught.value.message and not cluster.children


def test_agent_entries_record_the_groups_they_serve(tmp_path: Path) -> None:
    entry = AgentEntry("a", 1, 1, (), 1, 1, 0, 0, "/d", "/l", groups=3)
    state = sample_state(tmp_path)
    state.agents = [entry]
    record.save_state(state)
    loaded = record.load_state(tmp_path)
    assert loaded is not None and loaded.agents == [entry]


def test_an_agent_of_one_group_that_still_records_an_attempt_is_told_apart(
        tmp_path: Path) -> None:
    """What `dev add-group` checks once an agent of one group stopped: the agent's own rule
    (`agent.agent.group_store_dir`) for whether it may start serving several."""
    from agent.agent import FENCE_DIR, GROUPS_DIR, OUTBOX_DIR
    from agent.model import AttemptRecord, AttemptState, Resources
    from agent.outbox import Outbox

    data = tmp_path / "agent"
    assert dev_add_group._one_group_leftovers(data) is None  # never ran
    (data / FENCE_DIR).mkdir(parents=True)
    Outbox(data / OUTBOX_DIR).close()
    assert dev_add_group._one_group_leftovers(data) is None  # ran, holds nothing
    with Outbox(data / OUTBOX_DIR) as outbox:
        outbox.write(records=[AttemptRecord(5, "job", "t", 1, AttemptState.RUNNING,
                                            Resources(), "", 0)])
    problem = dev_add_group._one_group_leftovers(data)
    assert problem is not None and "holds 1 attempt(s)" in problem
    (data / GROUPS_DIR / "0").mkdir(parents=True)  # it serves several already
    assert dev_add_group._one_group_leftovers(data) is None
