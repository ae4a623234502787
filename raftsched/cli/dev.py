"""`raftsched dev up|add-agent|add-group|status|down`: a local cluster of real processes."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched import limits
from raftsched.cli import render
from raftsched.cli.common import EXIT_OK, Subparsers, command_parser, print_json
from raftsched.environment import DEV_DIR_ENV, SERVERS_ENV, TLS_ENV
from raftsched.options import integer, positive_seconds
from raftsched.protocol import ID_RULE

if TYPE_CHECKING:
    from raftsched.dev.record import ClusterState

# --- dev ------------------------------------------------------------------------------------------

_DEV_JSON = (
    '  --json: {"servers": [gRPC addresses], "replicas": [{"id", "pid", "address", '
    '"raft_address",\n           "leader", "alive"}], "agents": [{"cluster", "pid", "alive", '
    '"status",\n           "executor", "resources"}], "metrics": [URL of each replica\'s and '
    'agent\'s\n           /metrics], "slurm": {"conf", "partition", "daemons": [{"name", '
    '"pid", "alive"}]} | null,\n           "dir", ...}')


def register_dev(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    dev = commands.add_parser(
        "dev", help="a local cluster of real processes (up, add-agent, add-group, status, down)",
        description="Run a local cluster of real replica and agent processes on 127.0.0.1: "
        "raftsched dev up|add-agent|add-group|status|down. Its state is DIR/cluster.json; while it "
        "exists, the other commands use its servers by default.")
    sub = dev.add_subparsers(title="dev commands", metavar="COMMAND", required=True)
    directory = argparse.ArgumentParser(add_help=False)
    directory.add_argument("--dir", type=Path, default=None, metavar="DIR",
                           help=f"the cluster's directory (default: ${DEV_DIR_ENV}, else "
                           "./.raftsched-dev)")
    _register_dev_up(sub, [common, directory])
    _register_dev_add_agent(sub, [common, directory])
    _register_dev_add_group(sub, [common, directory])

    status = command_parser(
        sub, "status", [common, directory], "which dev cluster processes are alive, who leads",
        "Show each process recorded in DIR/cluster.json as alive or dead (by pid and start "
        "time), which replica leads, and each agent's cluster status.",
        "output:\n  tables of replicas and agents; exit 0 while a cluster is recorded, 2 if "
        f"none is\n{_DEV_JSON}")
    status.set_defaults(handler=_run_dev_status)

    down = command_parser(
        sub, "down", [common, directory], "stop the dev cluster's processes",
        "Stop exactly the processes recorded in DIR/cluster.json: each is signalled only if its "
        "pid still has the recorded start time (SIGTERM, then SIGKILL after "
        "STOP_TIMEOUT_S). A private Slurm ('dev up --slurm') goes last: its jobs are "
        "cancelled and their processes waited for, then its daemons are stopped the same way. "
        "Removes the state file and nothing else: logs, secret and data stay. "
        "Running it again is harmless.",
        "output:\n  a table NAME PID OUTCOME (stopped, killed, not running), or that nothing "
        'was recorded\n  --json: {"dir", "recorded": true|false, "stopped": [{"name", "pid", '
        '"outcome"}]}')
    down.set_defaults(handler=_run_dev_down)


def _register_dev_up(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    from raftsched.dev import record
    from raftsched.dev import slurm as dev_slurm

    slurm_agent = record.SLURM_AGENT
    up = command_parser(
        sub, "up", parents, "start replicas and agents locally and wait until ready",
        f"Start {record.DEFAULT_REPLICAS} (or 5) replicas and {record.DEFAULT_AGENTS} agents as "
        "background processes on ephemeral 127.0.0.1 ports, with a fresh cluster secret in "
        "DIR/secret (0600), a fresh throwaway CA in DIR/tls with a certificate for the "
        "replicas, each agent and you (raftsched-user:LOGIN, which the other commands then "
        "present), and logs in DIR/logs; wait until a replica leads and every agent's "
        "cluster is READY. Agents: cpu-east [linux], gpu-west [linux, gpu] (2 GPUs), then "
        "agent-3, ... [linux]. With --slurm, first a private single-node Slurm in DIR/slurm "
        "(munged, slurmctld, slurmd, recorded like the other processes), and cpu-east's agent "
        "fronts its partition (--executor slurm): cpu-east's tasks run as Slurm jobs. On "
        "failure, stop what was started and show the failing log.",
        "output:\n  progress lines on stderr, then tables of replicas (pid, gRPC and Raft "
        "address, role)\n  and agents; exit 0 when ready, 2 if a process exits while starting, "
        "a cluster\n  already runs in DIR or --slurm cannot run here (not root, Slurm not "
        f"installed),\n  3 on timeout\n{_DEV_JSON}")
    counts = record.REPLICA_COUNTS
    up.add_argument("--replicas", type=integer(min(counts), max(counts)),
                    choices=record.REPLICA_COUNTS,
                    default=record.DEFAULT_REPLICAS)
    up.add_argument("--agents", type=integer(0, record.MAX_AGENTS),
                    choices=range(record.MAX_AGENTS + 1),
                    default=record.DEFAULT_AGENTS, metavar=f"0..{record.MAX_AGENTS}",
                    help=f"agents to start (default {record.DEFAULT_AGENTS})")
    up.add_argument("--executor", choices=record.EXECUTORS, default=record.DEFAULT_EXECUTOR,
                    help="mock: tasks succeed without running; subprocess: run the commands "
                    f"(default {record.DEFAULT_EXECUTOR})")
    up.add_argument("--timeout", type=positive_seconds, default=record.UP_TIMEOUT_S,
                    metavar="SECONDS",
                    help=f"wait this long for readiness (UP_TIMEOUT_S, default "
                    f"{record.UP_TIMEOUT_S:g})")
    up.add_argument("--groups", type=integer(1, record.MAX_DEV_GROUPS), default=1,
                    metavar=f"1..{record.MAX_DEV_GROUPS}",
                    help="scheduler groups (issue 27: independent Raft groups sharing the "
                    "jobs by shard), each of --replicas replicas; every agent serves every "
                    "group, and the other commands route by the dev cluster's record "
                    "(default 1). The web console shows every group")
    up.add_argument("--insecure-dev", action="store_true",
                    help="no CA, no secret: every process runs with --insecure-dev (plaintext "
                    "gRPC and Raft without authentication; the other commands then speak "
                    "plaintext to it)")
    up.add_argument("--slurm", action="store_true",
                    help="also start a private single-node Slurm in DIR/slurm (partition "
                    f"{dev_slurm.PARTITION}: {slurm_agent.cpu} cpus, "
                    f"{slurm_agent.memory_mb} MB, features "
                    f"{','.join(slurm_agent.capabilities)}) and run {slurm_agent.cluster}'s "
                    "agent in front of it (--executor slurm). Needs root and the Debian "
                    "packages slurm-wlm and munge (scripts/demo --slurm installs them)")
    up.set_defaults(handler=_run_dev_up)


def _register_dev_add_agent(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    from raftsched.dev import record

    add = command_parser(
        sub, "add-agent", parents, "start one more agent on the running dev cluster",
        "Start the agent of one more compute cluster on the dev cluster running in DIR (to "
        "attach extra or differently sized clusters in tests, benchmarks and demos): with a "
        "certificate (raftsched-agent:ID) from the cluster's CA in DIR/tls (or --insecure-dev "
        "on a plaintext cluster), through the same supervisor as 'dev up', its log in "
        "DIR/logs/ID.log; record it in DIR/cluster.json, so that 'dev status' shows it and "
        "'dev down' stops it, and wait until the cluster reports ID READY. On failure, stop "
        "it, forget it and show its log. Sizes and capabilities default like 'raftsched "
        "agent': this machine's cores and memory, no GPU, no capabilities, no custom "
        "resources. With --executor slurm the agent fronts a Slurm partition instead (its "
        "sizes and node features are the partition's): that of the dev cluster's own Slurm "
        "('dev up --slurm', whose SLURM_CONF it gets), else of the Slurm $SLURM_CONF names.",
        "output:\n  progress lines on stderr, then the agent (pid, capabilities, sizes, "
        "status, log);\n  exit 0 when READY, 2 if no dev cluster runs in DIR, ID is invalid "
        "or taken, a size\n  or --resources is bad, Slurm does not answer or has no such "
        "partition, or the agent\n  exits while starting, 3 on timeout\n"
        '  --json: {"cluster", "pid", "alive", "capabilities", "status", "cpu", "memory_mb", '
        '"gpu",\n           "metrics_port", "data_dir", "log", "resources": {NAME: COUNT}, '
        '"executor",\n           "slurm_partition"} (an agent of dev status --json)')
    add.add_argument("--cluster-id", required=True, metavar="ID",
                     help="the new compute cluster's id, as jobs pin it with 'cluster:' "
                     f"({ID_RULE}; not taken by a recorded agent)")
    add.add_argument("--capabilities", default="", metavar="CAP,...",
                     help="capabilities it offers, comma-separated (default: none)")
    add.add_argument("--cpu", type=integer(0, record.MAX_CPU_CORES), default=None, metavar="CORES",
                     help="CPU cores it hands out (default: this machine's)")
    add.add_argument("--memory-mb", type=integer(0, limits.MAX_MEMORY_MB), default=None,
                     metavar="MB",
                     help="memory it hands out, in MiB (default: this machine's)")
    add.add_argument("--gpu", type=integer(0, limits.MAX_GPU), default=None, metavar="N",
                     help="GPUs it hands out (default: 0)")
    add.add_argument("--resources", default="", metavar="NAME=COUNT,...",
                     help="named custom resources it offers, e.g. fpga=2,license=10 (default: "
                     "none)")
    add.add_argument("--executor", choices=record.AGENT_EXECUTORS, default=None,
                     help="mock, subprocess, or slurm: submit each task to the Slurm partition "
                     "--slurm-partition (default: the one the cluster was started with)")
    add.add_argument("--slurm-partition", default="", metavar="NAME",
                     help="with --executor slurm: the partition it fronts ('debug' in the "
                     "private Slurm of 'dev up --slurm'); its cpus, memory, gpus and node "
                     "features replace --cpu, --memory-mb, --gpu and join --capabilities")
    add.add_argument("--timeout", type=positive_seconds, default=record.UP_TIMEOUT_S,
                     metavar="SECONDS",
                     help="wait this long for READY (UP_TIMEOUT_S, default "
                     f"{record.UP_TIMEOUT_S:g})")
    add.set_defaults(handler=_run_dev_add_agent)


def _register_dev_add_group(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    from raftsched.dev import record

    add = command_parser(
        sub, "add-group", parents, "grow the running dev cluster by one scheduler group",
        "Add a scheduler group to the dev cluster running in DIR, as docs/scale-out.md §5 "
        "grows a deployment: start the new group's replicas (as many as each group has, with "
        "the cluster's certificates and secret, --joining), recorded at once so that 'dev "
        "status' shows them and 'dev down' stops them; restart every agent, one after the "
        "other, so that it serves every group (drained, waited for until it runs nothing, "
        "stopped, started again with every group's servers on its data dir, READY in every "
        "group, undrained); then move shards to the new group ('admin groups add': three "
        "steps, each said as it goes). Afterwards the other commands given this dev dir talk "
        f"to every group. At most {record.MAX_DEV_GROUPS} groups (MAX_DEV_GROUPS). If it fails "
        "before the new group has a leader, its replicas are stopped and forgotten; later, "
        "what runs stays recorded and running the command again finishes the work.",
        "output:\n  progress lines on stderr, then the groups and the move's summary; exit 0 "
        "when done, 2 if no\n  dev cluster runs in DIR, it has MAX_DEV_GROUPS groups, a "
        "process exits or a step is\n  refused, 3 on timeout or when a group does not "
        "answer\n"
        '  --json: {"group", "groups", "epoch", "moved", "keys_imported", "keys_kept", '
        '"steps",\n           "servers": [[each group\'s gRPC addresses]], "replicas": [the '
        'new group\'s, as\n           in dev status --json], "restarted": [agent ids], '
        '"resumed"}')
    add.add_argument("--timeout", type=positive_seconds, default=record.UP_TIMEOUT_S,
                     metavar="SECONDS",
                     help="how long each wait may take: the new group's leader, an agent to "
                     "run nothing, an agent to be READY (UP_TIMEOUT_S, default "
                     f"{record.UP_TIMEOUT_S:g})")
    add.set_defaults(handler=_run_dev_add_group)


def _dev_dir(args: argparse.Namespace) -> Path:
    from raftsched.dev import record

    directory: Path | None = args.dir
    return directory if directory is not None else record.default_dir()


def _progress(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def _run_dev_up(args: argparse.Namespace) -> int:
    from raftsched.dev import status as dev_status
    from raftsched.dev import up as dev_up

    options = dev_up.UpOptions(_dev_dir(args), args.replicas, args.agents, args.executor,
                                   args.timeout, insecure=args.insecure_dev, slurm=args.slurm,
                                   groups=args.groups)
    state, view = dev_up.up(options, progress=_progress)
    document = dev_status.cluster_doc(state, view, dev_status.group_leaders(state))
    if args.json:
        print_json(document)
        return EXIT_OK
    slurm = (f"; a private Slurm, partition {state.slurm.partition}"
             if state.slurm is not None else "")
    print(f"dev cluster up: {len(state.replicas)} replicas, {len(state.agents)} agents "
          f"({state.executor} executor{slurm})\n")
    print(render.dev_cluster_text(document))
    if state.web is not None:
        token = state.user_tls.token if state.user_tls is not None else ""
        print(f"\nweb console: {state.web.url}  (sign in with an API token, e.g. the admin "
              f"token in {token}; its certificate is signed by the dev CA)")
    servers = ";".join(",".join(group) for group in document["groups"])
    print(f"\nuse it:  export {DEV_DIR_ENV}={state.dir}   (or {SERVERS_ENV}=\"{servers}\""
          f"{_tls_exports(state)})")
    print(f"stop it: raftsched dev down --dir {state.dir}")
    return EXIT_OK


def _run_dev_add_agent(args: argparse.Namespace) -> int:
    from raftsched.dev import add_agent as dev_add_agent
    from raftsched.dev import status as dev_status

    capabilities = tuple(c.strip() for c in str(args.capabilities).split(",") if c.strip())
    options = dev_add_agent.AddAgentOptions(_dev_dir(args), args.cluster_id, capabilities,
                                         args.cpu, args.memory_mb, args.gpu, args.executor,
                                         args.timeout,
                                         dev_add_agent.parse_resources(str(args.resources)),
                                         str(args.slurm_partition).strip())
    state, entry, view = dev_add_agent.add_agent(options, progress=_progress)
    document = dev_status.agent_doc(entry, view)
    if args.json:
        print_json(document)
        return EXIT_OK
    print(f"agent {entry.cluster} added to the dev cluster in {state.dir}\n")
    print(render.dev_agent_text(document))
    print(f"\nstop it (with the whole cluster): raftsched dev down --dir {state.dir}")
    return EXIT_OK


def _run_dev_add_group(args: argparse.Namespace) -> int:
    from raftsched.dev import add_group as dev_add_group
    from raftsched.dev import status as dev_status

    result = dev_add_group.add_group(
        dev_add_group.AddGroupOptions(_dev_dir(args), args.timeout), progress=_progress)
    state, report = result.state, result.report
    cluster = dev_status.cluster_doc(state, None, dev_status.group_leaders(state))
    replicas = [r for r in cluster["replicas"] if r["group"] == result.group]
    document = {"group": result.group, "groups": len(state.client_groups),
                "epoch": report.epoch, "moved": report.moved,
                "keys_imported": report.keys_imported, "keys_kept": report.keys_kept,
                "steps": report.steps, "servers": state.client_groups, "replicas": replicas,
                "restarted": list(result.restarted), "resumed": result.resumed}
    if args.json:
        print_json(document)
        return EXIT_OK
    print(f"group {result.group} added to the dev cluster in {state.dir}: "
          f"{len(state.client_groups)} scheduler groups at shard map epoch {report.epoch}; "
          f"{report.moved} shards moved, {report.keys_imported} idempotency keys handed over")
    print(f"replicas of group {result.group}: "
          + ", ".join(f"{r['id']} ({r['address']})" for r in replicas))
    if result.restarted:
        print(f"agents restarted to serve every group: {', '.join(result.restarted)}")
    servers = ";".join(",".join(group) for group in state.client_groups)
    print(f"\nuse it:  export {DEV_DIR_ENV}={state.dir}   (or {SERVERS_ENV}=\"{servers}\""
          f"{_tls_exports(state)})")
    return EXIT_OK


def _tls_exports(state: ClusterState) -> str:
    """How else to reach the cluster: the RAFTSCHED_TLS_* settings of its user certificate, or
    --insecure-dev."""
    if state.insecure:
        return " and --insecure-dev: plaintext"
    files = state.client_tls
    if files is None:
        return ""
    ca, cert, key = TLS_ENV
    return f" {ca}={files.ca} {cert}={files.cert} {key}={files.key}"


def _run_dev_status(args: argparse.Namespace) -> int:
    from raftsched.dev import status as dev_status

    state, view = dev_status.status(_dev_dir(args))
    document = dev_status.cluster_doc(state, view, dev_status.group_leaders(state))
    if args.json:
        print_json(document)
        return EXIT_OK
    leaders = [leader or "none known (no live replica answered)"
               for leader in document["leaders"]]
    if len(leaders) == 1:
        print(f"dev cluster in {state.dir}; leader: {leaders[0]}\n")
    else:
        print(f"dev cluster in {state.dir}; {len(leaders)} scheduler groups, leaders: "
              + "; ".join(f"group {g}: {leader}" for g, leader in enumerate(leaders)) + "\n")
    print(render.dev_cluster_text(document))
    return EXIT_OK


def _run_dev_down(args: argparse.Namespace) -> int:
    from raftsched.dev import down as dev_down
    from raftsched.dev import record

    directory = _dev_dir(args)
    results = dev_down.down(directory, _progress)
    stopped = [{"name": r.name, "pid": r.pid, "outcome": r.outcome} for r in results or []]
    if args.json:
        print_json({"dir": str(directory.resolve()), "recorded": results is not None,
                     "stopped": stopped})
    elif results is None:
        print(f"no dev cluster recorded in {directory}: nothing to stop")
    else:
        print(render.table(["NAME", "PID", "OUTCOME"],
                           [[s["name"], s["pid"], s["outcome"]] for s in stopped], right=[1]))
        print(f"\nstopped; logs kept in {directory.resolve() / record.LOG_DIR_NAME}")
    return EXIT_OK
