"""The dev cluster (raftsched.dev) without a cluster: the state file, ports, the secret, the
throwaway certificates, and `up`/`down` driven with stand-in processes (`sleep`) and a fake
readiness probe. Starting, identifying and stopping processes is the supervisor's
(test_supervisor.py)."""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftsched.dev import add_agent as dev_add_agent
from raftsched.dev import down as dev_down
from raftsched.dev import launch, ports, processes, record
from raftsched.dev import slurm as private_slurm
from raftsched.dev import status as dev_status
from raftsched.dev import supervisor as sv
from raftsched.dev import up as dev_up
from raftsched.dev.add_agent import AddAgentOptions, machine_memory_mb, requested_shape
from raftsched.dev.processes import ClusterView
from raftsched.dev.record import (
    AgentEntry,
    AgentShape,
    ClusterState,
    DaemonEntry,
    DevClusterError,
    ReplicaEntry,
    SlurmEntry,
    TlsPaths,
)
from raftsched.dev.up import UpOptions
from raftsched.errors import Code

SLEEPER = ["sleep", "60"]


def sample_state(directory: Path) -> ClusterState:
    state = ClusterState(str(directory), "mock", str(directory / "secret"), 1234,
                            user_tls=TlsPaths("/d/tls/ca.pem", "/d/tls/u.pem", "/d/tls/u.key"))
    state.replicas.append(ReplicaEntry("replica-1", 100, 555, "127.0.0.1:5001",
                                          "127.0.0.1:6001", 9001, "/d/r1", "/d/logs/r1.log"))
    state.agents.append(AgentEntry("gpu-west", 101, 556, ("linux", "gpu"), 4, 16384, 2, 9002,
                                      "/d/a1", "/d/logs/a1.log"))
    return state


# --- state file ---------------------------------------------------------------------------------


def test_state_file_round_trip(tmp_path: Path) -> None:
    assert record.load_state(tmp_path) is None
    state = sample_state(tmp_path)
    record.save_state(state)
    assert record.load_state(tmp_path) == state
    assert record.servers_from_state(tmp_path) == ["127.0.0.1:5001"]
    document = json.loads((tmp_path / "cluster.json").read_text())
    assert document["version"] == record.STATE_VERSION
    assert document["replicas"][0]["start_time_ticks"] == 555
    assert document["insecure"] is False
    assert document["user_tls"] == {"ca": "/d/tls/ca.pem", "cert": "/d/tls/u.pem",
                                    "key": "/d/tls/u.key", "token": ""}
    assert not (tmp_path / "cluster.json.tmp").exists()


def test_a_state_file_from_before_tls_describes_a_plaintext_cluster(tmp_path: Path) -> None:
    document = sample_state(tmp_path).to_doc()
    del document["insecure"], document["user_tls"]
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    state = record.load_state(tmp_path)
    assert state is not None and state.insecure and state.client_tls is None


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(version=99),
    lambda d: d.update(replicas="nope"),
    lambda d: d["replicas"][0].pop("pid"),
    lambda d: d["replicas"][0].update(pid="100"),
    lambda d: d["agents"][0].update(start_time_ticks=True),
    lambda d: d.update(dir=None),
    lambda d: d.update(created_ms="x"),
    lambda d: d.update(insecure="no"),
    lambda d: d.update(user_tls={"ca": "x"}),
    lambda d: d.update(user_tls={"ca": "x", "cert": "y", "key": "z", "token": 7}),
])
def test_a_damaged_state_file_is_refused_by_name(tmp_path: Path, mutate: Any) -> None:
    document = sample_state(tmp_path).to_doc()
    mutate(document)
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    with pytest.raises(DevClusterError) as caught:
        record.load_state(tmp_path)
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert "is not a raftsched dev cluster state file" in caught.value.message


def test_not_json_at_all(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{")
    with pytest.raises(DevClusterError):
        record.load_state(tmp_path)


# --- processes ----------------------------------------------------------------------------------


def start(children: list[sv.Child], argv: Sequence[str], tmp_path: Path) -> sv.Recorded:
    """A process that is no part of any dev cluster."""
    child = sv.Child("unrelated", argv, tmp_path / "unrelated.log")
    child.start()
    children.append(child)
    return child.recorded()


def test_recorded_processes_are_the_state_files_identities(tmp_path: Path) -> None:
    assert sample_state(tmp_path).processes() == [
        sv.Recorded("replica-1", sv.Identity(100, 555)),
        sv.Recorded("gpu-west", sv.Identity(101, 556))]


# --- ports, secret, lock, commands --------------------------------------------------------------


def test_pick_free_ports_gives_distinct_bindable_ports() -> None:
    picked = ports.pick_free_ports(12)
    assert len(set(picked)) == 12
    for port in picked:
        with socket.socket() as sock:
            sock.bind((ports.LOOPBACK, port))
    assert not ports.port_open(f"{ports.LOOPBACK}:{picked[0]}")
    with socket.socket() as server:
        server.bind((ports.LOOPBACK, 0))
        server.listen()
        assert ports.port_open(f"{ports.LOOPBACK}:{server.getsockname()[1]}")


def test_secret_is_fresh_random_and_owner_only(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("old")
    os.chmod(tmp_path / "secret", 0o644)
    path = record.write_secret(tmp_path)
    first = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 40 and first != "old"
    assert record.write_secret(tmp_path).read_text() != first


def test_only_one_dev_command_at_a_time(tmp_path: Path) -> None:
    with (record.exclusive(tmp_path),
          pytest.raises(DevClusterError, match="another 'raftsched dev' command"),
          record.exclusive(tmp_path)):
        pass
    with record.exclusive(tmp_path):
        pass


def test_agent_shapes() -> None:
    shapes = record.agent_shapes(4)
    assert [(s.cluster, s.capabilities, s.gpu) for s in shapes] == [
        ("cpu-east", ("linux",), 0), ("gpu-west", ("linux", "gpu"), 2),
        ("agent-3", ("linux",), 0), ("agent-4", ("linux",), 0)]
    assert all(s.cpu >= 1 and s.memory_mb >= 1024 for s in shapes)
    assert record.agent_shapes(0) == []


def test_commands_of_the_processes(tmp_path: Path) -> None:
    replica_tls = TlsPaths("ca.pem", "replica.pem", "replica.key")
    replica = processes.replica_command("127.0.0.1:1", "127.0.0.1:2",
                                        ["127.0.0.1:3", "127.0.0.1:4"], tmp_path / "r",
                                        tmp_path / "secret", 9, tls=replica_tls)
    assert replica[:4] == [sys.executable, "-m", "raftsched", "replica"]
    assert replica[4:] == ["--raft", "127.0.0.1:1", "--grpc", "127.0.0.1:2", "--peers",
                           "127.0.0.1:3,127.0.0.1:4", "--data-dir", str(tmp_path / "r"),
                           "--secret-file", str(tmp_path / "secret"), "--tls-ca", "ca.pem",
                           "--tls-cert", "replica.pem", "--tls-key", "replica.key",
                           "--metrics-port", "9"]
    insecure = processes.replica_command("127.0.0.1:1", "127.0.0.1:2", [], tmp_path / "r", None, 9,
                                  tls=None)
    assert insecure[-3:] == ["--insecure-dev", "--metrics-port", "9"]
    assert "--secret-file" not in insecure
    agent_tls = TlsPaths("ca.pem", "agent.pem", "agent.key")
    agent = processes.agent_command(record.FIRST_AGENTS[1], [["127.0.0.1:2"]], tmp_path / "a",
                                    "mock", 8, tls=agent_tls)
    assert agent[3:] == ["agent", "--cluster-id", "gpu-west", "--servers", "127.0.0.1:2",
                         "--capabilities", "linux,gpu", "--cpu", "4", "--memory-mb", "16384",
                         "--gpu", "2", "--data-dir", str(tmp_path / "a"), "--executor", "mock",
                         "--metrics-port", "8", "--tls-ca", "ca.pem", "--tls-cert", "agent.pem",
                         "--tls-key", "agent.key"]
    assert processes.agent_command(record.FIRST_AGENTS[1], [["127.0.0.1:2"]], tmp_path / "a",
                                   "mock", 8, tls=None)[-1] == "--insecure-dev"


def common_name(path: str) -> str:
    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_certificates_for_the_replicas_each_agent_and_the_user(tmp_path: Path) -> None:
    issued = processes.issue_certificates(tmp_path, ["cpu-east", "gpu-west"], "ada")
    assert common_name(issued.user.cert) == "raftsched-user:ada"
    assert {cluster: common_name(files.cert) for cluster, files in issued.agents.items()} == {
        "cpu-east": "raftsched-agent:cpu-east", "gpu-west": "raftsched-agent:gpu-west"}
    replica = x509.load_pem_x509_certificate(Path(issued.replica.cert).read_bytes())
    names = replica.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usages = replica.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    files = [issued.replica, issued.user, *issued.agents.values()]
    assert {Path(f.ca) for f in files} == {tmp_path / "tls" / "ca.pem"}
    for f in files:
        assert stat.S_IMODE(Path(f.key).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls" / "ca.key").stat().st_mode) == 0o600


@pytest.mark.parametrize(("login", "name"), [
    ("ada", "ada"), ("j.doe-2_x", "j.doe-2_x"), ("ad a/é:", "ada"), ("", record.DEFAULT_USER_NAME),
    ("x" * 100, "x" * record.MAX_USER_NAME_CHARS),
])
def test_the_dev_user_name(monkeypatch: pytest.MonkeyPatch, login: str, name: str) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: login)
    assert processes.local_user_name() == name


def test_child_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTSCHED_SECRET", "s3cret")
    monkeypatch.setenv("RAFTSCHED_SERVERS", "elsewhere:1")
    monkeypatch.setenv("KEEP_ME", "1")
    env = processes.child_env()
    assert "RAFTSCHED_SECRET" not in env and "RAFTSCHED_SERVERS" not in env
    assert env["KEEP_ME"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(record.__file__).resolve().parents[2])


# --- up and down with stand-in processes --------------------------------------------------------


class Stand:
    """A fake cluster: `spawn` starts `sleep` (or `failing`) instead of the real argv; `probe`
    answers from `views` (the last one repeats)."""

    def __init__(self, children: list[sv.Child]) -> None:
        self.children = children
        self.argvs: dict[str, list[str]] = {}
        self.envs: dict[str, Mapping[str, str] | None] = {}
        self.failing: set[str] = set()
        self.views: list[ClusterView | None] = [None, leader_view(), ready_view()]
        self.probes = 0
        self.probed_with: list[TlsPaths | None] = []
        self.interrupt_at_probe: int | None = None

    def spawn(self, name: str, argv: list[str], log: Path, cwd: Path,
              env: Mapping[str, str] | None = None) -> sv.Child:
        assert log.stem == name
        self.argvs[name] = argv
        self.envs[name] = env
        stand_in = (["sh", "-c", f"echo {name} cannot start >&2; exit 3"]
                    if name in self.failing else SLEEPER)
        child = processes.spawn_process(name, stand_in, log, cwd)
        self.children.append(child)
        return child

    def probe(self, servers: Sequence[str], tls: TlsPaths | None) -> ClusterView | None:
        self.probes += 1
        self.probed_with.append(tls)
        if self.probes == self.interrupt_at_probe:
            raise KeyboardInterrupt
        return self.views[min(self.probes - 1, len(self.views) - 1)]


def NO_TOKEN(servers: object, user: object, budget_s: float) -> str:
    """The console's watch token, without a cluster to make it."""
    return "watch-secret"


def leader_view(clusters: dict[str, str] | None = None) -> ClusterView:
    return ClusterView("127.0.0.1:1", 1, "127.0.0.1:1", clusters or {}, from_leader=True)


def ready_view() -> ClusterView:
    return leader_view({"cpu-east": "READY", "gpu-west": "READY"})


@pytest.fixture
def stand(children: list[sv.Child]) -> Stand:
    return Stand(children)


def up(stand: Stand, directory: Path, **options: Any) -> tuple[ClusterState, ClusterView]:
    messages: list[str] = []
    result = dev_up.up(UpOptions(directory, **options), progress=messages.append,
                   spawn=stand.spawn, probe=stand.probe, sleep=lambda s: None,
                   web_ready=lambda address: True,
                   web_token=NO_TOKEN)
    assert any("waiting for a leader" in m for m in messages)
    return result


def test_up_records_every_process_and_down_stops_exactly_those(
        stand: Stand, tmp_path: Path) -> None:
    state, view = up(stand, tmp_path)
    assert view == ready_view()
    assert [r.id for r in state.replicas] == ["replica-1", "replica-2", "replica-3"]
    assert [a.cluster for a in state.agents] == ["cpu-east", "gpu-west"]
    assert record.load_state(tmp_path) == state
    for process, child in zip(state.processes(), stand.children, strict=True):
        assert process == child.recorded() and process.alive()
    addresses = [r.grpc_address for r in state.replicas] + [r.raft_address for r in
                                                            state.replicas]
    assert len(set(addresses)) == 6 and all(a.startswith("127.0.0.1:") for a in addresses)
    replica_1 = stand.argvs["replica-1"]
    peers = replica_1[replica_1.index("--peers") + 1].split(",")
    assert peers == [r.raft_address for r in state.replicas[1:]]
    assert replica_1[replica_1.index("--secret-file") + 1] == str(tmp_path / "secret")
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert common_name(replica_1[replica_1.index("--tls-cert") + 1]) == "raftsched-replica"
    gpu = stand.argvs["gpu-west"]
    assert gpu[gpu.index("--servers") + 1] == ",".join(state.servers)
    assert common_name(gpu[gpu.index("--tls-cert") + 1]) == "raftsched-agent:gpu-west"
    assert gpu[gpu.index("--tls-ca") + 1] == str(tmp_path / "tls" / "ca.pem")
    assert not state.insecure and state.user_tls is not None
    assert common_name(state.user_tls.cert) == f"raftsched-user:{processes.local_user_name()}"
    assert stand.probed_with == [state.user_tls] * stand.probes
    assert dev_status.cluster_doc(state, view)["user_tls"]["key"] == state.user_tls.key
    header = (tmp_path / "logs" / "replica-1.log").read_text().splitlines()[0]
    assert header.startswith("--- ") and "replica-1 (raftsched dev): sleep 60" in header
    web = stand.argvs["web"]
    assert state.web is not None and state.web.url == f"https://{web[web.index('--listen') + 1]}/"
    assert web[web.index("--servers") + 1] == ",".join(state.servers)
    assert common_name(web[web.index("--tls-cert") + 1]) == "raftsched-user:web-console"
    assert web[web.index("--https-cert") + 1] == web[web.index("--tls-cert") + 1]
    assert dev_status.cluster_doc(state, view)["web"]["url"] == state.web.url
    watch = Path(web[web.index("--watch-token-file") + 1])
    assert watch.read_text() == "watch-secret\n"
    assert stat.S_IMODE(watch.stat().st_mode) == 0o600

    unrelated = start(stand.children, SLEEPER, tmp_path)
    results = dev_down.down(tmp_path)
    assert results is not None
    assert [(r.name, r.outcome) for r in results] == [
        ("replica-1", "stopped"), ("replica-2", "stopped"), ("replica-3", "stopped"),
        ("cpu-east", "stopped"), ("gpu-west", "stopped"), ("web", "stopped")]
    assert unrelated.alive()
    assert [child.poll() for child in stand.children[:-1]] == [-signal.SIGTERM] * 6
    assert not (tmp_path / "cluster.json").exists()
    assert (tmp_path / "logs" / "replica-1.log").exists() and (tmp_path / "secret").exists()
    assert dev_down.down(tmp_path) is None  # idempotent


def test_up_insecure_runs_plaintext_without_a_secret_or_certificates(
        stand: Stand, tmp_path: Path) -> None:
    state, _ = up(stand, tmp_path, insecure=True)
    assert state.insecure and state.user_tls is None and state.secret_file == ""
    assert record.load_state(tmp_path) == state
    for argv in stand.argvs.values():
        assert "--insecure-dev" in argv
        assert not {"--secret-file", "--tls-ca", "--tls-cert", "--tls-key"} & set(argv)
    assert not (tmp_path / "secret").exists() and not (tmp_path / "tls").exists()
    assert stand.probed_with == [None] * stand.probes
    document = dev_status.cluster_doc(state, None)
    assert (document["insecure"], document["user_tls"]) == (True, None)
    dev_down.down(tmp_path)


def test_up_refuses_while_a_cluster_runs_and_forgets_a_dead_one(
        stand: Stand, tmp_path: Path) -> None:
    state, _ = up(stand, tmp_path, agents=0)
    secret = (tmp_path / "secret").read_text()
    with pytest.raises(DevClusterError, match="already running") as caught:
        up(stand, tmp_path, agents=0)
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert (tmp_path / "secret").read_text() == secret  # the running cluster's, untouched
    assert record.load_state(tmp_path) == state
    for child in stand.children:
        child.kill()
    stand.probes = 0
    again, _ = up(stand, tmp_path, agents=0)  # the recorded processes are all gone
    assert [r.pid for r in again.replicas] != [r.pid for r in state.replicas]
    dev_down.down(tmp_path)


def test_up_stops_everything_when_a_process_dies_and_shows_its_log(
        stand: Stand, tmp_path: Path) -> None:
    stand.failing.add("replica-2")
    stand.views = [None]
    with pytest.raises(DevClusterError) as caught:
        up(stand, tmp_path)
    error = caught.value
    assert error.code is Code.FAILED_PRECONDITION
    assert error.message.startswith("replica-2 (pid ")
    assert error.log == str(tmp_path / "logs" / "replica-2.log")
    assert error.log_tail[-1] == "replica-2 cannot start"
    assert all(child.poll() is not None for child in stand.children)
    assert not (tmp_path / "cluster.json").exists()


def test_up_times_out_naming_what_it_waited_for(stand: Stand, tmp_path: Path) -> None:
    stand.views = [leader_view({"cpu-east": "READY"})]  # gpu-west never registers
    with pytest.raises(DevClusterError) as caught:
        dev_up.up(UpOptions(tmp_path, timeout_s=0.3), progress=lambda m: None,
              spawn=stand.spawn, probe=stand.probe)
    error = caught.value
    assert error.code is Code.UNAVAILABLE
    assert error.message.startswith("not every agent to be READY after 0.3 s (UP_TIMEOUT_S")
    assert "gpu-west not registered" in error.message
    assert error.log == str(tmp_path / "logs" / "gpu-west.log")
    assert all(child.poll() is not None for child in stand.children)


def test_ctrl_c_during_up_stops_what_was_started(stand: Stand, tmp_path: Path) -> None:
    stand.interrupt_at_probe = 2
    with pytest.raises(KeyboardInterrupt):
        up(stand, tmp_path)
    assert len(stand.children) == 3
    assert all(child.poll() is not None for child in stand.children)
    assert not (tmp_path / "cluster.json").exists()


def test_status_reports_processes_and_the_leader(stand: Stand, tmp_path: Path) -> None:
    with pytest.raises(DevClusterError) as caught:
        dev_status.status(tmp_path)
    assert caught.value.code is Code.NOT_FOUND
    recorded, _ = up(stand, tmp_path)
    stand.children[1].kill()
    asked: list[tuple[Sequence[str], TlsPaths | None]] = []

    def probe(servers: Sequence[str], tls: TlsPaths | None) -> ClusterView:
        asked.append((servers, tls))
        return ready_view()

    state, view = dev_status.status(tmp_path, probe=probe)
    # only live replicas are asked, with the recorded user certificate
    assert asked == [([state.servers[0], state.servers[2]], recorded.user_tls)]
    document = dev_status.cluster_doc(state, view)
    assert [r["alive"] for r in document["replicas"]] == [True, False, True]
    assert [a["status"] for a in document["agents"]] == ["READY", "READY"]
    results = dev_down.down(tmp_path)
    assert results is not None and results[1].outcome is sv.StopOutcome.NOT_RUNNING


# --- add-agent ----------------------------------------------------------------------------------


def test_the_recorded_authority_issues_more_certificates(tmp_path: Path) -> None:
    from raftsched.dev import pki

    issued = processes.issue_certificates(tmp_path, ["cpu-east"], "ada")
    authority = pki.load_authority(tmp_path / "tls")
    files = pki.issue_agent(authority, "big")
    assert files.ca == Path(issued.user.ca)
    assert common_name(str(files.cert)) == "raftsched-agent:big"
    ca = x509.load_pem_x509_certificate(Path(issued.user.ca).read_bytes())
    x509.load_pem_x509_certificate(files.cert.read_bytes()).verify_directly_issued_by(ca)
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600

    other = pki.create_authority(tmp_path / "other")
    (tmp_path / "tls" / "ca.key").write_bytes((tmp_path / "other" / "ca.key").read_bytes())
    with pytest.raises(ValueError, match="is not the key of"):
        pki.load_authority(tmp_path / "tls")
    with pytest.raises(ValueError, match="is not a CA certificate"):
        pki.load_authority(_leaf_as_ca(tmp_path, other))
    with pytest.raises(OSError):
        pki.load_authority(tmp_path / "missing")


def _leaf_as_ca(tmp_path: Path, authority: Any) -> Path:
    """A directory whose ca.pem is a leaf certificate, with its key as ca.key."""
    from raftsched.dev import pki

    files = pki.issue_agent(authority, "leaf")
    directory = tmp_path / "leaf"
    directory.mkdir()
    (directory / "ca.pem").write_bytes(files.cert.read_bytes())
    (directory / "ca.key").write_bytes(files.key.read_bytes())
    return directory


def test_the_requested_shape_has_the_agents_defaults() -> None:
    shape = requested_shape(AddAgentOptions(Path("d"), "big"))
    assert shape == AgentShape("big", (), os.cpu_count() or 1, machine_memory_mb(), 0)
    assert machine_memory_mb() > 0
    shape = requested_shape(AddAgentOptions(Path("d"), "x.1_b-2", ("linux", "gpu", "linux"),
                                                  cpu=0, memory_mb=0, gpu=8))
    assert (shape.capabilities, shape.cpu, shape.memory_mb, shape.gpu) == (("linux", "gpu"),
                                                                           0, 0, 8)


@pytest.mark.parametrize(("options", "message"), [
    ({"cluster": ""}, "--cluster-id must use only letters"),
    ({"cluster": "-big"}, "--cluster-id must use only letters"),
    ({"cluster": "big one"}, "--cluster-id must use only letters"),
    ({"cluster": "b" * 129}, "--cluster-id must be at most 128 characters"),
    ({"capabilities": ("linux", "g p u")}, "--capabilities: each must use only"),
    ({"capabilities": tuple(f"c{i}" for i in range(257))}, "--capabilities: at most 256"),
    ({"cpu": -1}, "--cpu -1: between 0 and 1000000"),
    ({"cpu": 1_000_001}, "--cpu 1000001: between 0 and 1000000"),
    ({"memory_mb": -5}, "--memory-mb -5: between 0 and"),
    ({"gpu": -1}, "--gpu -1: between 0 and 1000000"),
])
def test_a_bad_shape_is_refused_naming_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DevClusterError) as caught:
        requested_shape(AddAgentOptions(Path("d"), **{"cluster": "big", **options}))
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert caught.value.message.startswith(message), caught.value.message


def add(stand: Stand, directory: Path, cluster: str = "big", *, messages: list[str] | None = None,
        **options: Any) -> tuple[ClusterState, AgentEntry, ClusterView]:
    """`add_agent` on the stand's cluster, which reports `cluster` READY on the second probe."""
    stand.probes, stand.probed_with = 0, []
    stand.views = [ready_view(), leader_view({**ready_view().clusters, cluster: "READY"})]
    return dev_add_agent.add_agent(AddAgentOptions(directory, cluster, **options),
                        progress=(messages if messages is not None else []).append,
                        spawn=stand.spawn, probe=stand.probe, sleep=lambda s: None)


def test_add_agent_starts_records_and_waits_for_it_and_down_stops_it(
        stand: Stand, tmp_path: Path) -> None:
    before, _ = up(stand, tmp_path)
    messages: list[str] = []
    state, entry, view = add(stand, tmp_path, "big", messages=messages,
                             capabilities=("linux", "fast"), cpu=64, memory_mb=1024, gpu=1)
    assert (entry.cluster, entry.capabilities, entry.cpu, entry.memory_mb, entry.gpu) == (
        "big", ("linux", "fast"), 64, 1024, 1)
    assert view.clusters["big"] == "READY"
    assert record.load_state(tmp_path) == state
    assert state.agents == [*before.agents, entry]
    assert sv.Recorded("big", sv.Identity(entry.pid, entry.start_time_ticks)).alive()
    argv = stand.argvs["big"]
    assert argv[3:5] == ["agent", "--cluster-id"] and argv[5] == "big"
    for option, value in [("--servers", ",".join(state.servers)), ("--cpu", "64"),
                          ("--memory-mb", "1024"), ("--gpu", "1"), ("--executor", "mock"),
                          ("--capabilities", "linux,fast"), ("--data-dir", entry.data_dir),
                          ("--metrics-port", str(entry.metrics_port)),
                          ("--tls-ca", str(tmp_path / "tls" / "ca.pem"))]:
        assert argv[argv.index(option) + 1] == value
    assert common_name(argv[argv.index("--tls-cert") + 1]) == "raftsched-agent:big"
    # the run's data dir, the cluster's log dir, a port of its own
    assert Path(entry.data_dir).parent == Path(before.replicas[0].data_dir).parent
    assert entry.log == str(tmp_path / "logs" / "big.log")
    assert entry.metrics_port not in {a.metrics_port for a in before.agents}
    assert stand.probed_with == [state.user_tls] * stand.probes
    assert "waiting for agent big to be READY (up to 60 s)" in messages
    assert messages[0].startswith("starting agent big (mock executor; cpu 64, memory 1024 MB")
    assert messages[-1].startswith("big ready after ")
    document = dev_status.agent_doc(entry, view)
    assert document == dev_status.cluster_doc(state, view)["agents"][-1]
    assert set(document) == {"cluster", "pid", "alive", "capabilities", "status", "cpu",
                             "memory_mb", "gpu", "metrics_port", "data_dir", "log",
                             "resources", "executor", "slurm_partition"}
    assert (document["resources"], document["executor"], document["slurm_partition"]) == (
        {}, "mock", "")
    assert (document["status"], document["alive"], document["capabilities"]) == (
        "READY", True, ["linux", "fast"])

    listed, _ = dev_status.status(tmp_path, probe=lambda servers, tls: view)
    assert [a.cluster for a in listed.agents] == ["cpu-east", "gpu-west", "big"]
    results = dev_down.down(tmp_path)
    assert results is not None
    assert ("big", "stopped") in [(r.name, r.outcome) for r in results]
    assert not sv.Recorded("big", sv.Identity(entry.pid, entry.start_time_ticks)).alive()


def test_add_agent_on_an_insecure_cluster_runs_it_plaintext(stand: Stand, tmp_path: Path) -> None:
    up(stand, tmp_path, insecure=True)
    state, entry, _ = add(stand, tmp_path, "plain", executor="subprocess")
    argv = stand.argvs["plain"]
    assert argv[-1] == "--insecure-dev" and "--tls-cert" not in argv
    assert argv[argv.index("--executor") + 1] == "subprocess"
    assert not (tmp_path / "tls").exists()
    assert stand.probed_with == [None] * stand.probes
    assert record.load_state(tmp_path) == state and state.agents[-1] == entry
    dev_down.down(tmp_path)


def test_add_agent_refuses_without_a_running_cluster(stand: Stand, tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match="no dev cluster recorded in") as caught:
        add(stand, tmp_path / "none")
    assert caught.value.code is Code.NOT_FOUND
    assert not (tmp_path / "none").exists()
    state, _ = up(stand, tmp_path)
    stand.children[0].kill()
    stand.children[1].kill()
    with pytest.raises(DevClusterError, match="only 1 of the 3 replicas") as caught:
        add(stand, tmp_path)
    assert caught.value.code is Code.FAILED_PRECONDITION
    for child in stand.children:
        child.kill()
    with pytest.raises(DevClusterError, match="is not running") as caught:
        add(stand, tmp_path)
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert "big" not in stand.argvs and record.load_state(tmp_path) == state


@pytest.mark.parametrize(("cluster", "options", "code", "message"), [
    ("gpu-west", {}, Code.ALREADY_EXISTS, "--cluster-id 'gpu-west' is taken"),
    ("replica-2", {}, Code.ALREADY_EXISTS, "--cluster-id 'replica-2' is the name of a replica"),
    ("no good", {}, Code.INVALID_ARGUMENT, "--cluster-id must use only"),
    ("big", {"gpu": -2}, Code.INVALID_ARGUMENT, "--gpu -2"),
])
def test_add_agent_refuses_a_taken_id_or_a_bad_shape_before_starting_anything(
        stand: Stand, tmp_path: Path, cluster: str, options: dict[str, Any], code: Code,
        message: str) -> None:
    state, _ = up(stand, tmp_path)
    with pytest.raises(DevClusterError) as caught:
        add(stand, tmp_path, cluster, **options)
    assert caught.value.code is code and caught.value.message.startswith(message)
    assert len(stand.children) == 6 and record.load_state(tmp_path) == state
    dev_down.down(tmp_path)


def test_add_agent_refuses_beyond_the_bound_and_while_another_command_works(
        stand: Stand, tmp_path: Path) -> None:
    state, _ = up(stand, tmp_path, agents=0)
    with record.exclusive(tmp_path), pytest.raises(DevClusterError, match="another 'raftsched"):
        add(stand, tmp_path)
    filler = AgentEntry("x", 1, 1, (), 1, 1, 0, 1, "/d", "/l")
    state.agents = [filler] * record.MAX_RECORDED_AGENTS
    record.save_state(state)
    with pytest.raises(DevClusterError, match="MAX_RECORDED_AGENTS") as caught:
        add(stand, tmp_path)
    assert caught.value.code is Code.RESOURCE_EXHAUSTED
    assert len(stand.children) == 4  # 3 replicas and the web console
    dev_down.down(tmp_path)


def test_add_agent_stops_and_forgets_an_agent_that_exits(stand: Stand, tmp_path: Path) -> None:
    before, _ = up(stand, tmp_path)
    stand.failing.add("big")
    stand.views = [None]
    with pytest.raises(DevClusterError) as caught:
        dev_add_agent.add_agent(AddAgentOptions(tmp_path, "big"), progress=lambda m: None,
                     spawn=stand.spawn, probe=lambda servers, tls: None,
                     sleep=lambda s: None)
    error = caught.value
    assert error.code is Code.FAILED_PRECONDITION
    assert error.message.startswith("big (pid ")
    assert "while it was joining the cluster" in error.message
    assert error.log == str(tmp_path / "logs" / "big.log")
    assert error.log_tail[-1] == "big cannot start"
    assert record.load_state(tmp_path) == before
    assert all(process.alive() for process in before.processes())  # the rest runs on
    dev_down.down(tmp_path)


def test_add_agent_times_out_stops_and_forgets_it(stand: Stand, tmp_path: Path) -> None:
    before, _ = up(stand, tmp_path)
    stand.probes, stand.views = 0, [ready_view()]  # big never registers
    ticks = iter(range(1000))
    messages: list[str] = []
    with pytest.raises(DevClusterError) as caught:
        dev_add_agent.add_agent(AddAgentOptions(tmp_path, "big", timeout_s=10),
                     progress=messages.append, spawn=stand.spawn, probe=stand.probe,
                     clock=lambda: float(next(ticks)), sleep=lambda s: None)
    error = caught.value
    assert error.code is Code.UNAVAILABLE
    assert error.message.startswith("not agent big to be READY after 10 s (UP_TIMEOUT_S")
    assert "big not registered" in error.message
    assert error.log == str(tmp_path / "logs" / "big.log")
    assert any(m.startswith("still waiting for agent big to be READY: ")
               and m.endswith(" s of 10 s (big not registered)") for m in messages), messages
    assert stand.children[-1].poll() is not None
    assert record.load_state(tmp_path) == before
    # the same id can be tried again: the new agent resumes from the data dir left behind
    state, entry, _ = add(stand, tmp_path, "big")
    assert Path(entry.data_dir).is_dir() and state.agents[-1] == entry
    dev_down.down(tmp_path)


def test_ctrl_c_during_add_agent_stops_and_forgets_it(stand: Stand, tmp_path: Path) -> None:
    before, _ = up(stand, tmp_path)
    stand.probes, stand.interrupt_at_probe = 0, 1
    with pytest.raises(KeyboardInterrupt):
        dev_add_agent.add_agent(AddAgentOptions(tmp_path, "big"), progress=lambda m: None,
                     spawn=stand.spawn, probe=stand.probe, sleep=lambda s: None)
    assert stand.children[-1].poll() is not None
    assert record.load_state(tmp_path) == before
    dev_down.down(tmp_path)


# --- custom resources, Slurm agents and the private Slurm of `up --slurm` -----------------------


def slurm_state(directory: Path) -> ClusterState:
    state = sample_state(directory)
    state.agents.append(AgentEntry("cpu-east", 102, 557, ("linux",), 4, 8192, 0, 9003,
                                      "/d/a2", "/d/logs/a2.log", (("fpga", 1), ("lic", 2)),
                                      "slurm", "debug"))
    state.slurm = SlurmEntry("/d/slurm", "/d/slurm/slurm.conf", "debug",
                                "/d/slurm/jobcomp.txt", "/tmp/rs-munge-x", [
                                    DaemonEntry("munged", 103, 558, "/d/slurm/log/munged.log"),
                                    DaemonEntry("slurmctld", 104, 559, "/d/s/slurmctld.log")])
    return state


def test_the_private_slurm_and_an_agents_resources_round_trip(tmp_path: Path) -> None:
    state = slurm_state(tmp_path)
    record.save_state(state)
    assert record.load_state(tmp_path) == state
    document = json.loads((tmp_path / "cluster.json").read_text())
    assert document["agents"][1]["resources"] == {"fpga": 1, "lic": 2}
    assert (document["agents"][1]["executor"], document["agents"][1]["slurm_partition"]) == (
        "slurm", "debug")
    assert document["slurm"]["daemons"][1] == {"name": "slurmctld", "pid": 104,
                                               "start_time_ticks": 559,
                                               "log": "/d/s/slurmctld.log"}
    assert document["slurm"]["socket_dir"] == "/tmp/rs-munge-x"
    # the daemons are not among the processes `down` stops first
    assert [p.name for p in state.processes()] == ["replica-1", "gpu-west", "cpu-east"]
    assert state.slurm_daemons() == [sv.Recorded("munged", sv.Identity(103, 558)),
                                     sv.Recorded("slurmctld", sv.Identity(104, 559))]
    shown = dev_status.cluster_doc(state, None)
    assert shown["slurm"] == {"dir": "/d/slurm", "conf": "/d/slurm/slurm.conf",
                              "partition": "debug", "jobcomp": "/d/slurm/jobcomp.txt",
                              "daemons": [{"name": "munged", "pid": 103, "alive": False,
                                           "log": "/d/slurm/log/munged.log"},
                                          {"name": "slurmctld", "pid": 104, "alive": False,
                                           "log": "/d/s/slurmctld.log"}]}
    assert {key: shown["agents"][1][key] for key in ("resources", "executor",
                                                     "slurm_partition")} == {
        "resources": {"fpga": 1, "lic": 2}, "executor": "slurm", "slurm_partition": "debug"}
    assert state.slurm.client_env({"SLURM_JOB_ID": "7", "KEEP": "1"}) == {
        "KEEP": "1", "SLURM_CONF": "/d/slurm/slurm.conf"}


def test_a_state_file_from_before_slurm_and_resources_still_loads(tmp_path: Path) -> None:
    document = sample_state(tmp_path).to_doc()
    del document["slurm"]
    for key in ("resources", "executor", "slurm_partition"):
        del document["agents"][0][key]
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    state = record.load_state(tmp_path)
    assert state is not None and state.slurm is None and state.slurm_daemons() == []
    assert state.agents[0].resources == () and state.agents[0].executor == ""
    agent = dev_status.cluster_doc(state, None)["agents"][0]
    assert (agent["executor"], agent["resources"]) == ("mock", {})  # the cluster's executor
    assert dev_status.cluster_doc(state, None)["slurm"] is None


@pytest.mark.parametrize("mutate", [
    lambda d: d["agents"][1].update(resources={"lic": "2"}),
    lambda d: d["agents"][1].update(resources=[["lic", 2]]),
    lambda d: d.update(slurm={"dir": "/d/slurm"}),
    lambda d: d["slurm"].update(conf=5),
    lambda d: d["slurm"].update(daemons="munged"),
    lambda d: d["slurm"]["daemons"][0].update(pid="103"),
    lambda d: d["slurm"]["daemons"][0].pop("start_time_ticks"),
])
def test_a_damaged_slurm_or_resources_entry_is_refused(tmp_path: Path, mutate: Any) -> None:
    document = slurm_state(tmp_path).to_doc()
    mutate(document)
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    with pytest.raises(DevClusterError, match="is not a raftsched dev cluster state file"):
        record.load_state(tmp_path)


@pytest.mark.parametrize(("text", "resources"), [
    ("", ()), (" , ", ()), ("lic=2", (("lic", 2),)),
    ("matlab_license=10, fpga=2", (("fpga", 2), ("matlab_license", 10))),
    (f"big={1_000_000_000}", (("big", 1_000_000_000),)),
])
def test_parse_resources(text: str, resources: record.Resources) -> None:
    assert dev_add_agent.parse_resources(text) == resources


@pytest.mark.parametrize(("text", "message"), [
    ("lic", "--resources: 'lic' is not NAME=COUNT"),
    ("lic=two", "--resources: 'lic=two' is not NAME=COUNT"),
    ("lic=2,lic=3", "--resources: 'lic' is named twice"),
    ("lic=0", "--resources: lic=0: the count must be 1..1000000000"),
    ("lic=1000000001", "--resources: lic=1000000001: the count must be 1.."),
    ("=2", "--resources: each name must use only"),
    ("l c=2", "--resources: each name must use only"),
    (",".join(f"r{i}=1" for i in range(33)), "--resources: at most 32"),
])
def test_bad_resources_are_refused_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(DevClusterError) as caught:
        dev_add_agent.parse_resources(text)
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert caught.value.message.startswith(message), caught.value.message


def test_a_slurm_agents_shape_leaves_its_sizes_to_the_partition() -> None:
    shape = requested_shape(AddAgentOptions(Path("d"), "hpc", ("linux",),
                                                  executor="slurm", slurm_partition="debug",
                                                  resources=(("lic", 2),)))
    assert shape == AgentShape("hpc", ("linux",), 0, 0, 0, (("lic", 2),))


@pytest.mark.parametrize(("options", "message"), [
    ({"executor": "slurm"}, "--executor slurm needs --slurm-partition NAME"),
    ({"executor": "slurm", "slurm_partition": "p", "cpu": 2, "gpu": 0},
     "--cpu, --gpu: not with --executor slurm"),
    ({"executor": "slurm", "slurm_partition": "p", "memory_mb": 5}, "--memory-mb: not with"),
    ({"slurm_partition": "p"}, "--slurm-partition goes with --executor slurm"),
    ({"executor": "subprocess", "slurm_partition": "p"}, "--slurm-partition goes with"),
    ({"resources": (("lic", 0),)}, "--resources: lic=0: the count must be"),
])
def test_a_bad_slurm_or_resources_request_is_refused(options: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(DevClusterError) as caught:
        requested_shape(AddAgentOptions(Path("d"), "hpc", **options))
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert caught.value.message.startswith(message), caught.value.message


def test_the_command_of_a_slurm_agent_and_of_one_with_resources(tmp_path: Path) -> None:
    shape = AgentShape("hpc", ("linux",), 4, 8192, 0, (("fpga", 1), ("lic", 2)))
    argv = processes.agent_command(shape, [["127.0.0.1:2"]], tmp_path / "a", "slurm", 8, tls=None,
                            slurm_partition="debug")
    assert argv[3:] == ["agent", "--cluster-id", "hpc", "--servers", "127.0.0.1:2",
                        "--capabilities", "linux", "--slurm-partition", "debug",
                        "--resources", "fpga=1,lic=2", "--data-dir", str(tmp_path / "a"),
                        "--executor", "slurm", "--metrics-port", "8", "--insecure-dev"]
    plain = processes.agent_command(shape, [["127.0.0.1:2"]], tmp_path / "a", "mock", 8, tls=None)
    assert plain[plain.index("--cpu"):plain.index("--data-dir")] == [
        "--cpu", "4", "--memory-mb", "8192", "--gpu", "0", "--resources", "fpga=1,lic=2"]


class FakeSlurm:
    """Stands in for `private_slurm.LocalSlurm`: its three daemons are the stand's `sleep`s,
    spawned through the hook `up` passes; `fail` makes `start` fail after spawning them."""

    fail = False
    made: list[FakeSlurm] = []

    def __init__(self, directory: Path, *, start_timeout_s: float, cpus: int, memory_mb: int,
                 features: Sequence[str], spawn: Any) -> None:
        self.directory, self.partition, self.node = directory, "debug", "node-1"
        self.conf, self.jobcomp = directory / "slurm.conf", directory / "jobcomp.txt"
        self.log_dir, self.socket_dir, self.startup_s = directory / "log", None, 0.1
        self.size = (cpus, memory_mb, tuple(features))
        self.spawn, self.children = spawn, {}
        self.made.append(self)

    def start(self) -> None:
        for name in ("munged", "slurmctld", "slurmd"):
            self.children[name] = self.spawn(name, ["sleep", "60"],
                                             self.log_dir / f"{name}.out",
                                             {"SLURM_CONF": str(self.conf)}, self.directory)
        if self.fail:
            raise private_slurm.SlurmError("no node node-1 idle within 1 s",
                                           log=self.log_dir / "slurmd.out")

    def stop(self) -> private_slurm.Stopped:
        return private_slurm.stop_daemons(self.children, self.conf)


@pytest.fixture
def fake_slurm(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`up --slurm` with FakeSlurm; returns what the daemons were alive for when the Slurm's
    jobs were cancelled (so: after the agents and replicas stopped, before the daemons)."""
    cancelled: list[str] = []
    monkeypatch.setattr(private_slurm, "slurm_available", lambda: None)
    monkeypatch.setattr(private_slurm, "LocalSlurm", FakeSlurm)
    monkeypatch.setattr(FakeSlurm, "made", [])

    def cancel(env: Mapping[str, str], cwd: Path) -> None:
        state = record.load_state(cwd.parent)
        assert state is not None and env["SLURM_CONF"] == str(cwd / "slurm.conf")
        cancelled.extend(p.name for p in state.processes() + state.slurm_daemons()
                         if p.alive())

    monkeypatch.setattr(private_slurm, "cancel_jobs", cancel)
    return cancelled


def test_up_slurm_records_the_daemons_and_puts_cpu_east_in_front_of_it(
        stand: Stand, tmp_path: Path, fake_slurm: list[str]) -> None:
    messages: list[str] = []
    state, _ = dev_up.up(UpOptions(tmp_path, slurm=True, executor="subprocess"),
                     progress=messages.append, spawn=stand.spawn, probe=stand.probe,
                     sleep=lambda s: None, web_token=NO_TOKEN, web_ready=lambda address: True)
    (slurm,) = FakeSlurm.made
    assert slurm.directory == tmp_path / "slurm"
    assert slurm.size == (4, 8192, ("linux",))  # cpu-east's size; its capability as a feature
    assert state.slurm is not None and record.load_state(tmp_path) == state
    assert [d.name for d in state.slurm.daemons] == ["munged", "slurmctld", "slurmd"]
    for daemon in state.slurm_daemons():
        assert daemon.identity == slurm.children[daemon.name].identity and daemon.alive()
    assert (state.slurm.conf, state.slurm.partition) == (str(slurm.conf), "debug")
    assert state.slurm.daemons[2].log == str(tmp_path / "slurm" / "log" / "slurmd.log")
    east, west = stand.argvs["cpu-east"], stand.argvs["gpu-west"]
    assert east[east.index("--executor") + 1] == "slurm" and "--cpu" not in east
    assert east[east.index("--slurm-partition") + 1] == "debug"
    assert east[east.index("--capabilities") + 1] == "linux"
    cpu_east_env = stand.envs["cpu-east"]
    assert cpu_east_env is not None and cpu_east_env["SLURM_CONF"] == str(slurm.conf)
    assert west[west.index("--executor") + 1] == "subprocess" and stand.envs["gpu-west"] is None
    assert [(a.cluster, a.executor, a.slurm_partition) for a in state.agents] == [
        ("cpu-east", "slurm", "debug"), ("gpu-west", "subprocess", "")]
    assert messages[0].startswith(f"starting a private Slurm in {tmp_path / 'slurm'}")
    assert any("cpu-east: Slurm partition debug" in m for m in messages)
    with pytest.raises(DevClusterError, match="already running"):
        dev_up.up(UpOptions(tmp_path, slurm=True), progress=messages.append, spawn=stand.spawn,
              probe=stand.probe, sleep=lambda s: None)

    results = dev_down.down(tmp_path)
    assert results is not None
    assert [(r.name, r.outcome) for r in results] == [
        ("replica-1", "stopped"), ("replica-2", "stopped"), ("replica-3", "stopped"),
        ("cpu-east", "stopped"), ("gpu-west", "stopped"), ("web", "stopped"),
        ("slurmd", "stopped"), ("slurmctld", "stopped"), ("munged", "stopped")]
    assert fake_slurm == ["munged", "slurmctld", "slurmd"]  # jobs cancelled after the agents
    assert not any(d.alive() for d in state.slurm_daemons())
    assert not (tmp_path / "cluster.json").exists()


def test_up_slurm_stops_the_daemons_it_recorded_when_slurm_does_not_start(
        stand: Stand, tmp_path: Path, fake_slurm: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeSlurm, "fail", True)
    with pytest.raises(DevClusterError) as caught:
        dev_up.up(UpOptions(tmp_path, slurm=True), progress=lambda m: None, spawn=stand.spawn,
              probe=stand.probe, sleep=lambda s: None)
    error = caught.value
    assert error.code is Code.FAILED_PRECONDITION
    assert error.message.startswith("the private Slurm did not start: no node node-1 idle")
    assert error.log == str(tmp_path / "slurm" / "log" / "slurmd.out")
    assert error.log_tail and error.log_tail[0].startswith("--- ")  # the supervisor's header
    assert len(stand.children) == 3 and all(c.poll() is not None for c in stand.children)
    assert fake_slurm == ["munged", "slurmctld", "slurmd"]
    assert not (tmp_path / "cluster.json").exists()


def test_up_slurm_is_refused_in_one_line_where_slurm_cannot_run(
        stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private_slurm, "slurm_available", lambda: "a private Slurm needs root")
    with pytest.raises(DevClusterError) as caught:
        dev_up.up(UpOptions(tmp_path, slurm=True), progress=lambda m: None, spawn=stand.spawn,
              probe=stand.probe)
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert caught.value.message == "--slurm: a private Slurm needs root"
    assert stand.children == [] and not (tmp_path / "cluster.json").exists()


def test_add_agent_slurm_fronts_the_clusters_own_slurm_with_its_partitions_size(
        stand: Stand, tmp_path: Path, fake_slurm: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.executors.slurm
    from agent.executors import ExecutorError

    asked: list[tuple[str, dict[str, str] | None]] = []

    def capacity(partition: str, env: dict[str, str] | None = None) -> Any:
        asked.append((partition, env))
        if partition != "debug":
            raise ExecutorError(f"Slurm partition {partition!r} has no node")
        return agent.executors.slurm.PartitionCapacity(8000, 4000, 1, ("linux", "big-mem"))

    monkeypatch.setattr(agent.executors.slurm, "partition_capacity", capacity)
    state, _ = dev_up.up(UpOptions(tmp_path, slurm=True), progress=lambda m: None,
                     spawn=stand.spawn, probe=stand.probe, sleep=lambda s: None,
                     web_token=NO_TOKEN, web_ready=lambda address: True)
    assert state.slurm is not None
    messages: list[str] = []
    state, entry, _ = add(stand, tmp_path, "hpc", messages=messages, executor="slurm",
                          slurm_partition="debug", capabilities=("hpc",),
                          resources=(("lic", 2),))
    assert asked[-1][0] == "debug" and asked[-1][1] is not None
    assert asked[-1][1]["SLURM_CONF"] == state.slurm.conf
    assert (entry.cpu, entry.memory_mb, entry.gpu, entry.capabilities) == (
        8, 4000, 1, ("hpc", "linux", "big-mem"))
    assert (entry.executor, entry.slurm_partition, entry.resources) == ("slurm", "debug",
                                                                       (("lic", 2),))
    argv, env = stand.argvs["hpc"], stand.envs["hpc"]
    assert argv[argv.index("--slurm-partition") + 1] == "debug" and "--cpu" not in argv
    assert argv[argv.index("--resources") + 1] == "lic=2"
    assert env is not None and env["SLURM_CONF"] == state.slurm.conf
    assert messages[0].startswith("starting agent hpc (slurm executor, Slurm partition debug; "
                                  "cpu 8, memory 4000 MB, gpu 1; capabilities hpc,linux,big-mem;"
                                  " resources lic=2;")
    document = dev_status.agent_doc(entry, None)
    assert (document["resources"], document["executor"], document["slurm_partition"]) == (
        {"lic": 2}, "slurm", "debug")

    with pytest.raises(DevClusterError) as caught:
        add(stand, tmp_path, "hpc2", executor="slurm", slurm_partition="gpu")
    assert caught.value.code is Code.FAILED_PRECONDITION
    assert caught.value.message.startswith("--slurm-partition gpu: Slurm partition 'gpu' has "
                                           "no node (asked the dev cluster's private Slurm;")
    slurmctld = next(c for c in stand.children if c.name == "slurmctld")
    slurmctld.kill()
    with pytest.raises(DevClusterError, match="private Slurm of the dev cluster in .* is not "
                                                 r"running \(slurmctld \(pid \d+\) gone\)"):
        add(stand, tmp_path, "hpc3", executor="slurm", slurm_partition="debug")
    dev_down.down(tmp_path)


def test_add_agent_slurm_without_a_private_slurm_asks_the_one_slurm_conf_names(
        stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.executors.slurm
    from agent.executors import ExecutorError

    def capacity(partition: str, env: dict[str, str] | None = None) -> Any:
        assert env is not None
        raise ExecutorError(f"sinfo -p {partition}: cannot reach {env.get('SLURM_CONF')}")

    monkeypatch.setattr(agent.executors.slurm, "partition_capacity", capacity)
    up(stand, tmp_path)
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/site.conf")
    with pytest.raises(DevClusterError) as caught:
        add(stand, tmp_path, "hpc", executor="slurm", slurm_partition="gpu")
    assert caught.value.message.startswith(
        "--slurm-partition gpu: sinfo -p gpu: cannot reach /etc/slurm/site.conf (asked the "
        "Slurm SLURM_CONF=/etc/slurm/site.conf names;")
    monkeypatch.delenv("SLURM_CONF")
    with pytest.raises(DevClusterError, match="the Slurm of this machine's default "
                                                 "configuration"):
        add(stand, tmp_path, "hpc", executor="slurm", slurm_partition="gpu")
    assert "hpc" not in stand.argvs
    dev_down.down(tmp_path)


def test_traversable_adds_go_x_from_the_top_down_to_the_bottom_only(tmp_path: Path) -> None:
    top = tmp_path / "dev"
    bottom = top / "data" / "run"
    (bottom / "cpu-east").mkdir(parents=True)
    for directory in (top, top / "data", bottom, bottom / "cpu-east"):
        directory.chmod(0o700)
    (top / "data").chmod(0o711)
    assert launch.traversable(top, bottom) == [top, bottom]
    modes = [stat.S_IMODE(d.stat().st_mode) for d in (top, top / "data", bottom)]
    assert modes == [0o711, 0o711, 0o711]
    assert stat.S_IMODE((bottom / "cpu-east").stat().st_mode) == 0o700  # the agent's own
    assert stat.S_IMODE(tmp_path.stat().st_mode) & 0o011 == 0  # nothing above the top


def test_up_as_root_lets_task_accounts_through_to_subprocess_agents_and_says_so(
        stand: Stand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    top = tmp_path / "dev"
    top.mkdir(mode=0o700)
    messages: list[str] = []
    state, _ = dev_up.up(UpOptions(top, executor="subprocess"), progress=messages.append,
                     spawn=stand.spawn, probe=stand.probe, sleep=lambda s: None,
                     web_token=NO_TOKEN, web_ready=lambda address: True)
    data_dir = Path(state.agents[0].data_dir)
    assert all(stat.S_IMODE(d.stat().st_mode) & 0o011 == 0o011
               for d in (top, data_dir.parent.parent, data_dir.parent))
    assert stat.S_IMODE((top / "logs").stat().st_mode) == 0o700
    said = [m for m in messages if m.startswith("let task accounts pass through ")]
    assert len(said) == 1 and said[0].startswith(f"let task accounts pass through {top}")
    assert said[0].endswith("(chmod go+x): tasks reach their work and checkpoint dirs by "
                            "absolute path")  # once: the second agent found them open
    dev_down.down(top)
