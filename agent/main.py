"""`raftsched agent`: wiring only. Parses the options, opens the data dir, starts metrics, runs
the agent until SIGTERM or SIGINT.

`add_arguments(parser)` and `run(args)` are the CLI hook; `main(argv)` runs the same thing stand
alone (`python -m agent`). Exit status: 0 after a clean stop, 1 when the data dir is unusable or
the agent stopped on an internal error, 2 for bad arguments. Errors are one `error: ...` line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from cryptography import x509
from cryptography.x509.oid import NameOID

from agent import containment
from agent.agent import (
    HEARTBEAT_WAIT_MS,
    Agent,
    AgentConfig,
    AgentError,
    GroupedAgent,
    attempts_root,
    check_data_dir_free,
)
from agent.executors import (
    Executor,
    ExecutorError,
    MockExecutor,
    SubprocessExecutor,
    TaskUser,
)
from agent.executors.slurm import SlurmExecutor, partition_capacity
from agent.metrics import AgentMetrics
from agent.model import Resources
from agent.session import GrpcSession, SessionError
from agent.store import StoreError
from raftsched import config, eventlog, files, options, tls, topology
from raftsched.clock import configure_skew_from_env
from raftsched.environment import (
    AGENT_DATA_DIR_ENV,
    SERVERS_ENV,
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_KEY_ENV,
)
from raftsched.errors import RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.limits import (
    MAX_AGENT_QUEUE_DEPTH,
    MAX_CAPABILITIES_PER_CLUSTER,
    MAX_CPU_MILLI,
    MAX_CUSTOM_RESOURCE_COUNT,
    MAX_CUSTOM_RESOURCES_PER_CLUSTER,
    MAX_GPU,
    MAX_ID_CHARS,
    MAX_MEMORY_MB,
)
from raftsched.options import (
    integer,
    metrics_address,
    metrics_endpoint,
    port,
)
from raftsched.protocol import ID_RULE, id_problem, show

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2
MAX_METRICS_PORT = 65_535
MAX_HEARTBEAT_WAIT_MS = 60_000
TOPOLOGY_FIRST_WAIT_S = 120.0
"""An agent given one group's servers that never learned every group's (GetTopology) asks this
long at most before it serves that group alone (replicas may still be starting)."""
TOPOLOGY_WAIT_S = 60.0
"""One that learned them (TOPOLOGY_FILE) serves those at once and asks again beside, this long
at most."""
TOPOLOGY_FILE = "topology.json"
DEFAULT_ROOT_TASK_USER = "nobody"
"""Tasks of an agent running as root run as this account unless --task-user says otherwise."""
MAX_TENANT_TASK_USERS = 1_000
"""Entries of --tenant-task-users (a machine has a few dozen accounts for tenants at most)."""
UNLISTED_TENANTS = "(tenants not listed)"
"""How `shared_task_users` names the tenants that run as --task-user."""
_NO_USER_SWITCH = {"slurm": "Slurm runs each job as the account that submits it, the agent's",
                   "mock": "the mock executor runs no processes"}
"""Why an executor takes no --task-user / --tenant-task-users."""
PRIVATE_UMASK = 0o077
"""Everything the agent creates (lmdb stores, attempt records, task output) is its own alone."""

log = EventLogger("agent")


class UsageError(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the agent of one compute cluster: it registers with the scheduler's leader, admits "
        "fenced assignments against this cluster's declared capacity, runs them, and reports "
        "their results. State (fences, unacked reports, attempts) lives in --data-dir and "
        "survives restarts; running tasks survive the agent itself.")
    parser.epilog = ("Stops cleanly on SIGTERM or SIGINT. Exit status: 0 after a clean stop, 1 "
                     "when the data dir is unusable or the agent failed, 2 for bad arguments.")
    config.add_option(parser, "agent")
    _add_cluster_arguments(parser)
    _add_executor_arguments(parser)
    _add_tls_arguments(parser)
    _add_task_user_arguments(parser)
    _add_observability_arguments(parser)


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-id", required=True, metavar="ID",
                        help="this cluster's id, as jobs pin it with 'cluster:' "
                             f"({ID_RULE}; at most {MAX_ID_CHARS} characters)")
    parser.add_argument("--servers", default=None,
                        metavar="HOST:PORT,...",  # a comma list (raftsched.config: an array)
                        help="gRPC addresses of the scheduler replicas, comma-separated; any of "
                             "them will do, the agent follows redirects to the leader "
                             f"(default: ${SERVERS_ENV}). With several scheduler groups, each "
                             "group's list separated by ';', in group order (in a config file: "
                             "one string, 'a:1,b:1;c:1,d:1'): the agent serves "
                             "every group (a session, fence store and outbox each, in "
                             "DATA/groups/N/), arbitrates its capacity across them, and keeps "
                             "a local queue of --queue-depth per group, started in that "
                             "group's turn")
    parser.add_argument("--capabilities", default="", metavar="CAP,...",
                        help="capabilities this cluster offers, comma-separated (e.g. "
                             "linux,gpu); a task is placed here only if all it requires is "
                             "among them")
    parser.add_argument("--resources", default="", metavar="NAME=COUNT,...",
                        help="named custom resources this cluster offers, comma-separated (e.g. "
                             "fpga=2,matlab_license=10); a task asking for some "
                             "(resources.custom) is placed here only while enough are free; "
                             "the scheduler counts what tasks hold, the agent cannot observe "
                             "them (default: none)")
    parser.add_argument("--cpu", type=options.number(0, MAX_CPU_MILLI / 1000),
                        default=float(os.cpu_count() or 1), metavar="CORES",
                        help="CPU cores the agent may hand out, fractions allowed "
                             "(default: this machine's cores)")
    parser.add_argument("--memory-mb", type=integer(0, MAX_MEMORY_MB),
                        default=_total_memory_mb(), metavar="MB",
                        help="memory the agent may hand out, in MiB (default: this machine's)")
    parser.add_argument("--gpu", type=integer(0, MAX_GPU), default=0, metavar="N",
                        help="GPUs the agent may hand out (default: 0)")
    parser.add_argument("--data-dir", default=os.environ.get(AGENT_DATA_DIR_ENV, ""), metavar="DIR",
                        help="directory for the agent's durable state and attempt dirs (task "
                             "stdout/stderr); one agent per directory "
                             f"(default: ${AGENT_DATA_DIR_ENV})")
    parser.add_argument("--queue-depth", type=integer(0, MAX_AGENT_QUEUE_DEPTH), default=None,
                        metavar="N",
                        help="assignments the agent may hold in a local queue beyond its free "
                             "capacity, started the moment a slot frees (late binding; 0: no "
                             f"queue; at most {MAX_AGENT_QUEUE_DEPTH}); default: about a tenth "
                             "of the slots, as Dask sizes worker saturation: max(1, --cpu "
                             "cores // 10); with several scheduler groups, per group. The "
                             "scheduler never queues a task that asks for a custom resource "
                             "(--resources): it holds that room first")


def _add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("subprocess", "mock", "slurm"),
                        default="subprocess",
                        help="subprocess: run each task's command for real (default); slurm: "
                             "submit each task as a job to the Slurm partition "
                             "--slurm-partition (sbatch/scontrol/scancel found on PATH, the "
                             "cluster through $SLURM_CONF; capacity and capabilities are read "
                             "from the partition with sinfo); mock: pretend, for tests and "
                             "benchmarks (argv 'mock sleep_ms=N exit=K fail_attempts=M')")
    parser.add_argument("--slurm-partition", default="", metavar="NAME",
                        help="the Slurm partition this cluster stands for (--executor slurm)")


def _add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-ca", metavar="PEM",
                        help=f"the cluster's CA (or ${TLS_CA_ENV}); required unless --insecure-dev")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help="this agent's certificate, issued for 'raftsched-agent:CLUSTER_ID' "
                             f"(or ${TLS_CERT_ENV})")
    parser.add_argument("--tls-key", metavar="PEM", help=f"its private key (or ${TLS_KEY_ENV})")
    parser.add_argument("--insecure-dev", action="store_true",
                        help="talk to replicas run with --insecure-dev: plaintext, no identity; "
                             "only for a throwaway local cluster")


def _add_task_user_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-user", default=None, metavar="USER",
                        help="run tasks as this account (name or uid; subprocess executor). "
                             "Switching users needs root. Default: "
                             f"'{DEFAULT_ROOT_TASK_USER}' when the agent runs as root, else the "
                             "agent's own user; '' (empty) runs tasks as the agent's own user "
                             "even as root (tasks can then read the agent's data dir)")
    parser.add_argument("--tenant-task-users", default="", metavar="TENANT=USER,...",
                        help="run the tasks of these tenants as these accounts instead (names "
                             "or uids, e.g. analytics=rs-analytics,web=rs-web; subprocess "
                             "executor, agent as root), so that tasks of different tenants "
                             "cannot read, write or signal each other's work dirs, checkpoints "
                             "or processes even when they run at once; tenants not listed run "
                             "as --task-user. An account must exist and not be root (the "
                             "agent's own). Tenants may share an account (then they are not "
                             "isolated from each other, and the agent warns at start). Read at "
                             "start: a change applies to attempts started after it (running "
                             "ones keep their account; a task's checkpoint that another "
                             "account wrote is discarded) (default: none)")
    parser.add_argument("--task-containment", choices=containment.CHOICES,
                        default=containment.AUTO,
                        help="how the end of an attempt ends every process its task started "
                             "(subprocess executor): cgroup: one cgroup v2 group per attempt, "
                             "killed whole (needs a writable cgroup v2 hierarchy, as root); "
                             "session: the task's session and the processes of its account "
                             "that carry its RAFTSCHED_FENCE (a process that leaves the session "
                             "and clears its environment escapes); auto: cgroup where it can, "
                             "else session (default). The agent logs task_containment at start "
                             "and exports raftsched_agent_task_containment{mode}")


def _add_observability_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=port, default=0, metavar="PORT",
                        help="serve Prometheus metrics on 127.0.0.1:PORT (default: 0, off)")
    parser.add_argument("--metrics-address", default=None,
                        metavar="HOST:PORT",
                        help="serve Prometheus metrics on HOST:PORT instead, e.g. 0.0.0.0:9101 "
                             "so that a Prometheus on another host can scrape (port 0: off)")
    parser.add_argument("--heartbeat-wait-ms", type=integer(0, MAX_HEARTBEAT_WAIT_MS),
                        default=HEARTBEAT_WAIT_MS,
                        metavar="MS", help="long-poll wait of each heartbeat; the leader caps "
                                           f"it (default: {HEARTBEAT_WAIT_MS})")
    parser.add_argument("--log-level", default="info", type=str.lower, choices=eventlog.LEVELS,
                        help="log events at this level and above, as JSON lines on stderr "
                             "(default info)")


def run(args: argparse.Namespace) -> int:
    try:
        config, servers = _config(args)
        tls_files = _tls(args, config.cluster_id)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    eventlog.configure(args.log_level)
    previous_umask = os.umask(PRIVATE_UMASK)
    try:
        return _run(args, config, servers, tls_files)
    finally:
        os.umask(previous_umask)  # `run` is also called in-process (tests, embedding programs)


def _run(args: argparse.Namespace, config: AgentConfig, servers: list[list[str]],
         tls_files: tls.TlsFiles | None) -> int:
    stop = threading.Event()
    metrics = AgentMetrics()
    try:
        if args.executor != "subprocess" and args.task_user:
            raise UsageError(f"--task-user applies to --executor subprocess only "
                             f"({_NO_USER_SWITCH[args.executor]})")
        task_user = _task_user(args.task_user) if args.executor == "subprocess" else None
        tenant_users = _tenant_task_users(str(args.tenant_task_users), args.executor)
        config.data_dir.mkdir(parents=True, exist_ok=True)  # unusable: said before any call
        _prepare_task_users(config.data_dir, task_user, tenant_users)
        if args.executor == "slurm":
            config = _slurm_config(config, str(args.slurm_partition))
        executor = _executor(args.executor, config, task_user, str(args.slurm_partition),
                             tenant_users, str(args.task_containment))
        if isinstance(executor, SubprocessExecutor):
            _check_subprocess(executor, task_user, tenant_users, metrics)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as error:
        print(f"error: cannot use data dir {config.data_dir}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    endpoint = metrics_endpoint(args.metrics_address, args.metrics_port)
    try:  # served from the start: also while no replica answers yet
        if endpoint is not None:
            metrics.serve(*endpoint)
    except OSError as error:
        executor.close()
        print(f"error: cannot serve metrics on {endpoint}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    given = servers
    if len(servers) == 1:
        try:
            check_data_dir_free(config.data_dir)  # said now, not after the groups are asked
        except AgentError as error:
            executor.close()
            print(f"error: {error}", file=sys.stderr)
            return EXIT_FAILURE
        _stop_on_signals(stop)  # a stop while the groups are asked for ends the agent cleanly
        servers = _discovered_groups(servers[0], tls_files, stop, config.data_dir)
        if stop.is_set():
            executor.close()
            return EXIT_OK
    try:
        agent, sessions = _new_agent(config, servers, executor, metrics, stop, tls_files)
    except (AgentError, StoreError, OSError) as error:
        executor.close()
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        if len(given) == 1:
            _keep_topology(config.data_dir, given[0], servers)
            _recheck_topology(given[0], servers, tls_files, stop, config.data_dir)
        _install_signal_handlers(agent)
        agent.run()
    except AgentError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        agent.close()
        executor.close()
        for session in sessions:
            session.close()
    return EXIT_OK


def _new_agent(config: AgentConfig, servers: list[list[str]], executor: Executor,
               metrics: AgentMetrics, stop: threading.Event, tls_files: tls.TlsFiles | None,
               ) -> tuple[Agent | GroupedAgent, list[GrpcSession]]:
    """The agent of one group's `servers`, or of several (one core per group), and its
    sessions (closed again if it cannot be made)."""
    sessions = [GrpcSession(group, stop=stop, tls_files=tls_files) for group in servers]
    try:
        if len(sessions) == 1:
            return Agent(config, sessions[0], executor, metrics=metrics, stop=stop), sessions
        return GroupedAgent(config, list(sessions), executor, metrics=metrics,
                            stop=stop), sessions
    except BaseException:
        for session in sessions:
            session.close()
        raise


def _discovered_groups(servers: list[str], tls_files: tls.TlsFiles | None,
                       stop: threading.Event, data_dir: Path) -> list[list[str]]:
    """Every scheduler group's servers when these (one group's) belong to a deployment of
    several (GetTopology, issue 27), else just these. What an agent learned is kept in
    DATA/TOPOLOGY_FILE and used at its next start without waiting for any replica (a restart
    during a partition serves at once what it served before; `_recheck_topology` asks again
    meanwhile). An agent that never learned it asks for up to TOPOLOGY_FIRST_WAIT_S (replicas
    may still be starting), then serves these servers' group alone, and says so."""
    known = _saved_topology(data_dir / TOPOLOGY_FILE, servers)
    if known is not None:
        log.info("topology_saved", groups=len(known),
                 servers=";".join(",".join(group) for group in known))
        return known
    session = GrpcSession(servers, stop=stop, tls_files=tls_files)
    try:
        groups = session.topology(budget_s=TOPOLOGY_FIRST_WAIT_S)
    except SessionError as error:
        if not stop.is_set():
            log.warning("topology_unknown", servers=",".join(servers), error=str(error),
                        waited_s=TOPOLOGY_FIRST_WAIT_S)
        return [servers]
    finally:
        session.close()
    if groups is None:
        return [servers]
    log.info("topology_learned", groups=len(groups),
             servers=";".join(",".join(group) for group in groups))
    return groups


def _recheck_topology(given: list[str], served: list[list[str]], tls_files: tls.TlsFiles | None,
                      stop: threading.Event, data_dir: Path) -> None:
    """Ask the given servers again, beside the running agent (for at most TOPOLOGY_WAIT_S):
    a topology other than the one served is kept for the next start and logged
    (`topology_changed`: restart the agent to serve it)."""
    def ask() -> None:
        session = GrpcSession(given, stop=stop, tls_files=tls_files)
        try:
            groups = session.topology(budget_s=TOPOLOGY_WAIT_S) or [given]
        except SessionError:
            return
        finally:
            session.close()
        if groups != served:
            log.warning("topology_changed", served=len(served), now=len(groups),
                        servers=";".join(",".join(group) for group in groups))
            _keep_topology(data_dir, given, groups)

    threading.Thread(target=ask, name="agent-topology", daemon=True).start()


def _keep_topology(data_dir: Path, given: list[str], served: list[list[str]]) -> None:
    """What the agent serves, learned from one group's servers `given`: kept for its next
    start (once it holds its data dir: never written into another agent's)."""
    saved = data_dir / TOPOLOGY_FILE
    try:
        Path(str(saved) + files.PARTIAL_SUFFIX).unlink(missing_ok=True)  # a crash's leftover
        with files.written_whole(str(saved)) as out:
            out.write(json.dumps({"servers": given, "groups": served}).encode())
    except (OSError, files.InTheWay) as error:
        log.warning("topology_not_saved", path=str(saved), error=str(error))


def _saved_topology(path: Path, servers: list[str]) -> list[list[str]] | None:
    """The groups learned before from these same servers, if DATA holds them."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        groups = topology.parse_groups(";".join(",".join(g) for g in doc["groups"]), str(path))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return groups if doc.get("servers") == servers else None


def _stop_on_signals(stop: threading.Event) -> None:
    """Until the agent's own handlers: SIGTERM or SIGINT sets `stop`."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftsched agent")
    add_arguments(parser)
    try:
        args = config.parse_args(parser, argv, "agent")
    except config.ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return stop.code if isinstance(stop.code, int) else EXIT_INVALID
    return run(args)


def _config(args: argparse.Namespace) -> tuple[AgentConfig, list[list[str]]]:
    cluster_id = str(args.cluster_id)
    problem = id_problem(cluster_id)  # the replicas' rule for a Register's cluster id
    if problem is not None:
        raise UsageError(f"--cluster-id {problem}")
    servers = _server_groups(args.servers)
    capabilities = tuple(dict.fromkeys(c.strip() for c in str(args.capabilities).split(",")
                                       if c.strip()))
    if len(capabilities) > MAX_CAPABILITIES_PER_CLUSTER:
        raise UsageError(f"--capabilities: at most {MAX_CAPABILITIES_PER_CLUSTER}")
    for capability in capabilities:
        problem = id_problem(capability)
        if problem is not None:
            raise UsageError(f"--capabilities: {show(capability)} is not a valid name: it "
                             f"{problem}")
    if not args.cpu >= 0 or args.cpu > 1_000_000:  # also refuses NaN
        raise UsageError(f"--cpu {args.cpu}: a number of cores between 0 and 1000000")
    if args.memory_mb < 0 or args.gpu < 0:
        raise UsageError("--memory-mb and --gpu cannot be negative")
    if not 0 <= args.metrics_port <= MAX_METRICS_PORT:
        raise UsageError(f"--metrics-port {args.metrics_port}: 0 (off) or a port number")
    if isinstance(args.metrics_address, str):
        try:
            args.metrics_address = metrics_address(args.metrics_address)
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"--metrics-address: {error}") from None
    if not 0 <= args.heartbeat_wait_ms <= MAX_HEARTBEAT_WAIT_MS:
        raise UsageError(f"--heartbeat-wait-ms: between 0 and {MAX_HEARTBEAT_WAIT_MS}")
    if not args.data_dir:
        raise UsageError(f"no data dir: pass --data-dir or set ${AGENT_DATA_DIR_ENV}")
    try:
        configure_skew_from_env()
    except ValueError as error:
        raise UsageError(str(error)) from None
    capacity = Resources(round(args.cpu * 1000), int(args.memory_mb), int(args.gpu))
    custom = _custom_resources(str(args.resources))
    return AgentConfig(cluster_id, Path(args.data_dir), capacity, capabilities,
                       heartbeat_wait_ms=int(args.heartbeat_wait_ms),
                       custom=custom,
                       queue_depth=_queue_depth(args.queue_depth, args.cpu)), servers


def default_queue_depth(cpu_cores: float) -> int:
    """About a tenth of the slots, at least 1 (Dask's worker saturation)."""
    return max(1, int(cpu_cores) // 10)


def _queue_depth(option: int | None, cpu_cores: float) -> int:
    """--queue-depth, else about a tenth of the slots. Custom resources need no exception: only
    the scheduler counts them, and it never queues a task that asks for one
    (`raftsched.state.feasibility.fits_queue`): such a task is assigned only into committed
    room, so the agent's cpu, memory and gpu check is all a queued start needs."""
    if option is None:
        return default_queue_depth(cpu_cores)
    if not 0 <= option <= MAX_AGENT_QUEUE_DEPTH:
        raise UsageError(f"--queue-depth {option}: between 0 and {MAX_AGENT_QUEUE_DEPTH}")
    return int(option)


def _server_groups(flag: str | None) -> list[list[str]]:
    """--servers, else $RAFTSCHED_SERVERS: each scheduler group's addresses (one list: one
    group), by the one HOST:PORT rule (`options.host_port`), the error naming where the bad
    item came from (and its group)."""
    source, text = ("--servers", flag) if flag is not None else \
        (f"${SERVERS_ENV}", os.environ.get(SERVERS_ENV, ""))
    if not text.strip():
        raise UsageError(f"no scheduler addresses: pass --servers or set ${SERVERS_ENV}")
    try:
        return topology.parse_groups(text, source)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _custom_resources(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_custom_resources(text)
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_custom_resources(text: str) -> tuple[tuple[str, int], ...]:
    """`--resources fpga=2,license=10` as sorted (name, count) pairs; ValueError naming the
    entry that is wrong. `raftsched dev add-agent --resources` checks with this too."""
    found: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, count_text = item.partition("=")
        try:
            count = int(count_text) if equals else None
        except ValueError:
            count = None
        if count is None:
            raise ValueError(f"--resources: {item!r} is not NAME=COUNT (a whole number)")
        if name in found:
            raise ValueError(f"--resources: {name!r} is named twice")
        found[name] = count
    pairs = tuple(sorted(found.items()))
    problem = custom_resources_problem(pairs)
    if problem is not None:
        raise ValueError(problem)
    return pairs


def custom_resources_problem(pairs: tuple[tuple[str, int], ...]) -> str | None:
    """Why these (name, count) pairs break the rules of custom resources (names are ids, counts
    1..MAX_CUSTOM_RESOURCE_COUNT, at most MAX_CUSTOM_RESOURCES_PER_CLUSTER), naming the one
    that does, or None."""
    if len(pairs) > MAX_CUSTOM_RESOURCES_PER_CLUSTER:
        return f"--resources: at most {MAX_CUSTOM_RESOURCES_PER_CLUSTER}"
    for name, count in pairs:
        problem = id_problem(name)
        if problem is not None:
            return f"--resources: each name {problem}"
        if not 1 <= count <= MAX_CUSTOM_RESOURCE_COUNT:
            return (f"--resources: {name}={count}: the count must be 1.."
                    f"{MAX_CUSTOM_RESOURCE_COUNT}")
    return None


def _tls(args: argparse.Namespace, cluster_id: str) -> tls.TlsFiles | None:
    """The agent's certificate files, checked to name this cluster; None with --insecure-dev."""
    try:
        files = tls.files_from(args.tls_ca, args.tls_cert, args.tls_key)
        if files is None:
            if args.insecure_dev:
                return None
            raise UsageError("replicas are reached over mutual TLS only: pass --tls-ca, "
                             "--tls-cert and --tls-key (a certificate issued for "
                             f"'{tls.agent_name(cluster_id)}'), or --insecure-dev for a "
                             "plaintext throwaway cluster")
        if args.insecure_dev:
            raise UsageError("--insecure-dev and TLS files exclude each other")
        _, cert, _ = files.load()
    except RaftschedError as error:
        raise UsageError(error.message) from None
    try:
        names = x509.load_pem_x509_certificate(cert).subject.get_attributes_for_oid(
            NameOID.COMMON_NAME)
    except ValueError as error:
        raise UsageError(f"--tls-cert {files.cert}: {error}") from None
    named = str(names[0].value) if names else ""
    if named != tls.agent_name(cluster_id):
        raise UsageError(f"--tls-cert {files.cert} is issued for {named!r}, not "
                         f"{tls.agent_name(cluster_id)!r}: replicas would refuse every call")
    return files


def _task_user(option: str | None) -> TaskUser | None:
    """The account tasks run as; None: the agent's own."""
    root = os.geteuid() == 0
    name = (DEFAULT_ROOT_TASK_USER if root else "") if option is None else option.strip()
    if not name:
        return None
    try:
        user = TaskUser.resolve(name)
    except (KeyError, ValueError, OverflowError):
        raise UsageError(f"--task-user {name!r}: no such user on this machine") from None
    if user.uid == os.geteuid():
        return None
    if not root:
        raise UsageError(f"--task-user {name!r}: running tasks as another user needs the agent "
                         "to run as root (or pass --task-user '' to run them as yourself)")
    return user


def _tenant_task_users(option: str, executor: str) -> dict[str, TaskUser]:
    """`--tenant-task-users a=u1,b=u2` as {tenant: account}; UsageError naming what is wrong."""
    names = _tenant_user_names(option)
    if not names:
        return {}
    if executor != "subprocess":
        raise UsageError(f"--tenant-task-users applies to --executor subprocess only "
                         f"({_NO_USER_SWITCH[executor]})")
    if os.geteuid() != 0:
        raise UsageError("--tenant-task-users: running tasks as other users needs the agent "
                         "to run as root")
    return {tenant: _tenant_user(tenant, name) for tenant, name in names.items()}


def _tenant_user_names(text: str) -> dict[str, str]:
    """The TENANT=USER pairs of `text`, checked for form only (no account is looked up)."""
    found: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        tenant, equals, name = (part.strip() for part in item.partition("="))
        if not equals or not tenant or not name:
            raise UsageError(f"--tenant-task-users: {item!r} is not TENANT=USER")
        problem = id_problem(tenant)
        if problem is not None:
            raise UsageError(f"--tenant-task-users: {item!r}: {tenant!r} is not a tenant name: "
                             f"it {problem}")
        if tenant in found:
            raise UsageError(f"--tenant-task-users: tenant {tenant!r} is named twice")
        found[tenant] = name
    if len(found) > MAX_TENANT_TASK_USERS:
        raise UsageError(f"--tenant-task-users: at most {MAX_TENANT_TASK_USERS} tenants")
    return found


def _tenant_user(tenant: str, name: str) -> TaskUser:
    where = f"--tenant-task-users: {tenant}={name}"
    try:
        user = TaskUser.resolve(name)
    except (KeyError, ValueError, OverflowError):
        raise UsageError(f"{where}: no such user on this machine") from None
    if user.uid == 0:  # the agent's own account too: a mapping needs the agent to run as root
        raise UsageError(f"{where}: that is root, the agent's own account: the tenant's tasks "
                         "would not be isolated (they could read the agent's data dir and keys)")
    return user


def _prepare_task_users(data_dir: Path, task_user: TaskUser | None,
                        tenant_users: Mapping[str, TaskUser]) -> None:
    """When tasks run as other accounts: the data dir made private, and a warning for each
    account several tenants share."""
    users = {user.uid: user for user in (task_user, *tenant_users.values()) if user is not None}
    if not users:
        return
    _make_private(data_dir)
    for user, tenants in shared_task_users(task_user, tenant_users):
        log.warning("task_user_shared", user=user.name, tenants=",".join(tenants),
                    hint="tasks of these tenants can read, write and signal each other's: give "
                         "each its own account in --tenant-task-users to isolate them")


def check_task_users_reach(directories: list[Path], task_user: TaskUser | None,
                           tenant_users: Mapping[str, TaskUser]) -> None:
    """UsageError naming the first of `directories` (where tasks get their work dirs, HOME and
    checkpoint dirs) that a task account cannot reach, the directory in its way and the fix:
    absolute paths the agent hands to tasks (HOME, RAFTSCHED_CHECKPOINT_DIR) would not
    resolve for them, and a checkpoint saved there would be lost without a word."""
    users = {user.uid: user for user in (task_user, *tenant_users.values()) if user is not None}
    for user in users.values():
        for directory in directories:
            try:
                blocked = user.blocked_at(directory)
            except OSError as error:
                raise UsageError(str(error)) from None
            if blocked is not None:
                raise UsageError(
                    f"task account {user.name} (uid {user.uid}) cannot pass through {blocked} "
                    f"({_mode_of(blocked)}) to reach {directory}, where its tasks get their "
                    f"work dir, HOME and checkpoint dir: let it through (chmod o+x {blocked}) "
                    f"or put --data-dir where every directory above it lets others pass")


def _mode_of(directory: Path) -> str:
    try:
        found = directory.stat()
    except OSError as error:
        return error.strerror or "unreadable"
    return f"mode {found.st_mode & 0o7777:04o}, owner uid {found.st_uid}"


def shared_task_users(task_user: TaskUser | None, tenant_users: Mapping[str, TaskUser]
                      ) -> list[tuple[TaskUser, list[str]]]:
    """Each account that runs the tasks of more than one tenant of --tenant-task-users (the
    tenants not listed there count as one, UNLISTED_TENANTS, when they share --task-user), with
    those tenants; by uid, so two names of one uid are one account."""
    by_uid: dict[int, tuple[TaskUser, list[str]]] = {}
    if task_user is not None:
        by_uid[task_user.uid] = (task_user, [UNLISTED_TENANTS])
    for tenant, user in sorted(tenant_users.items()):
        by_uid.setdefault(user.uid, (user, []))[1].append(tenant)
    return [(user, tenants) for user, tenants in by_uid.values() if len(tenants) > 1]


def _make_private(data_dir: Path) -> None:
    """What a data dir made by an older agent (umask 022) holds directly (lmdb stores, the lock
    file) becomes the agent's alone; attempt and checkpoint dirs are handled by the executor."""
    if not data_dir.is_dir():
        return
    for child in data_dir.iterdir():
        if child.name != attempts_root(data_dir).name and not child.is_symlink():
            child.chmod(child.stat().st_mode & 0o700)


def _executor(kind: str, config: AgentConfig, task_user: TaskUser | None,
              partition: str, tenant_users: Mapping[str, TaskUser] | None = None,
              task_containment: str = containment.AUTO) -> Executor:
    if kind == "mock":
        return MockExecutor()
    if kind == "slurm":
        return SlurmExecutor(attempts_root(config.data_dir), partition,
                             cluster_id=config.cluster_id)
    root = attempts_root(config.data_dir)
    try:
        chosen = containment.choose(task_containment, config.cluster_id, root)
    except containment.ContainmentError as error:
        raise UsageError(str(error)) from None
    return SubprocessExecutor(root, task_user=task_user, tenant_users=tenant_users,
                              containment=chosen)


def _check_subprocess(executor: SubprocessExecutor, task_user: TaskUser | None,
                      tenant_users: Mapping[str, TaskUser], metrics: AgentMetrics) -> None:
    """The task accounts reach their dirs (else UsageError, and the executor is closed: its
    empty cgroup goes); then says how attempts are contained."""
    try:
        check_task_users_reach(executor.task_dirs(), task_user, tenant_users)
    except UsageError:
        executor.close()
        raise
    _announce_containment(executor.containment, metrics)


def _announce_containment(chosen: containment.Containment, metrics: AgentMetrics) -> None:
    """The start-up line and the metric that tell an operator how attempts are contained."""
    log.info("task_containment", mode=chosen.mode, cgroup=str(chosen.parent or ""),
             reason=chosen.reason)
    metrics.task_containment.labels(mode=chosen.mode).set(1)


def _slurm_config(config: AgentConfig, partition: str) -> AgentConfig:
    """The cluster's capacity and capabilities as the Slurm partition has them (its nodes'
    features become capabilities, beside --capabilities)."""
    if not partition:
        raise UsageError("--executor slurm needs --slurm-partition NAME")
    try:
        found = partition_capacity(partition)
    except ExecutorError as error:
        raise UsageError(f"--slurm-partition {partition}: {error}") from None
    capabilities = tuple(dict.fromkeys((*config.capabilities, *found.capabilities)))
    log.info("slurm_partition", partition=partition, cpu_milli=found.cpu_milli,
             memory_mb=found.memory_mb, gpu=found.gpu, capabilities=",".join(capabilities))
    return dataclasses.replace(config, capacity=Resources(found.cpu_milli, found.memory_mb,
                                                          found.gpu),
                               capabilities=capabilities)


def _install_signal_handlers(agent: Agent | GroupedAgent) -> None:
    def handle(number: int, _frame: FrameType | None) -> None:
        log.info("stop_requested", signal=signal.Signals(number).name)
        agent.stop()

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; the embedding program stops the agent
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, handle)


def _total_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 0
