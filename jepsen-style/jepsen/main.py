"""`jepsen-style/run`: start a cluster in private namespaces, run the workload against it while
the nemesis injects faults, heal, wait for liveness, collect every replica's applied log and
state digest, check the history, print the results table.

Exit status: 0 no violation and liveness met; 1 a safety violation (or the harness itself
failed); 2 bad arguments or an unusable machine; 3 no violation but liveness not met;
77 network namespaces are impossible here (not root and no user namespaces): nothing was run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from jepsen import checker as checker_mod
from jepsen.cluster import ClusterUnderTest
from jepsen.grow import Grower
from jepsen.history import History
from jepsen.hostile import HOSTILE_CLUSTER
from jepsen.nemesis import GROUPS, KINDS, FaultError, Nemesis, parse_faults
from jepsen.netns import Net, NetError, iptables_binary
from jepsen.workload import ClientWorker, create_schedules
from raftsched.errors import RaftschedError
from raftsched.limits import MAX_GROUPS
from raftsched.states import TERMINAL_JOB_STATE_NAMES

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_LIVENESS, EXIT_NO_NAMESPACES = 0, 1, 2, 3, 77
INSIDE_ENV = "RAFTSCHED_JEPSEN_INSIDE"
STARTUP_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 5.0
JOIN_TIMEOUT_S = 30.0
CONVERGE_TIMEOUT_S = 20.0
LIVENESS_POLL_S = 0.5
AGENT_CAPACITY = {"cpu": 4.0, "memory_mb": 4096, "gpu": 0, "capabilities": ["linux"]}
TERMINAL_JOB_STATES = TERMINAL_JOB_STATE_NAMES
HERE = Path(__file__).resolve().parent.parent
REQUIRED_TOOLS = ("unshare", "nsenter", "ip")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jepsen-style/run",
        description="Fault-injection test of a real raftsched cluster: N replicas and M agents "
                    "as processes in their own network namespaces (inside private namespaces: "
                    "the host is not touched), concurrent clients, a seeded nemesis, then a "
                    "checker over the whole history, every replica's applied log and an "
                    "external side-effect ledger. Needs root (or user namespaces), iptables, "
                    "iproute2 and util-linux.",
        epilog="Fault groups: " + "; ".join(f"{g} = {', '.join(k)}" for g, k in GROUPS.items()
                                            if g != "all") + "; all = every kind.\n"
               "Soak: jepsen-style/run --nodes 5 --time 600 --faults all --seed N.\n"
               "Exit status: 0 clean, 1 violation, 2 bad usage, "
               "3 liveness not met, 77 namespaces impossible here.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3,
                   help="replicas (of each group; default 3)")
    p.add_argument("--groups", type=int, default=1, metavar="K",
                   help="scheduler groups (issue 27), each of --nodes replicas with its own "
                        "Raft log; every agent serves every group and the clients route by "
                        "key and job id (default 1). With K > 1 every replica fault hits one "
                        "seeded group; the `group` faults take a group's quorum away")
    p.add_argument("--grow", action="store_true",
                   help="add a scheduler group while the run goes on: one more group is "
                        "started with --joining and, at a seeded moment, shards move to it "
                        "(`admin groups add`'s steps, tried again after every failure) under "
                        "the faults; the checker then finds where each job lives")
    p.add_argument("--agents", type=int, default=2, help="agents, one cluster each (default 2)")
    p.add_argument("--clients", type=int, default=3, help="concurrent clients (default 3)")
    p.add_argument("--time", type=float, default=60.0, metavar="S",
                   help="seconds of workload under faults (default 60)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the nemesis schedule and the workload (default: random, "
                        "printed)")
    p.add_argument("--faults", default="kill,partition,pause", metavar="LIST",
                   help="comma-separated fault groups or kinds (default kill,partition,pause); "
                        f"kinds: {', '.join(KINDS)}")
    p.add_argument("--results", type=Path, default=None, metavar="DIR",
                   help="results folder (default jepsen-style/results/<time>-seed<N>)")
    p.add_argument("--liveness-bound-s", type=float, default=60.0, metavar="S",
                   help="after the final heal, every acknowledged job must be terminal within "
                        "this (default 60)")
    p.add_argument("--suspect-after-s", type=float, default=3.0, metavar="S",
                   help="replica --suspect-after-s (default 3)")
    p.add_argument("--lost-after-s", type=float, default=8.0, metavar="S",
                   help="replica --lost-after-s; agent-cut faults last longer than this. Keep "
                        "it above an agent's heartbeat deadline (6 s), or a leader change alone "
                        "can declare agents LOST (default 8)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    if args.time <= 0 or args.agents < 1 or args.clients < 1 or args.liveness_bound_s <= 0:
        print("error: --time, --liveness-bound-s must be > 0; --agents, --clients >= 1",
              file=sys.stderr)
        return EXIT_USAGE
    if not 0 < args.suspect_after_s < args.lost_after_s:
        print("error: need 0 < --suspect-after-s < --lost-after-s", file=sys.stderr)
        return EXIT_USAGE
    if not 1 <= _total_groups(args) <= MAX_GROUPS:
        print(f"error: --groups (with --grow: one more) must be 1 to {MAX_GROUPS}", file=sys.stderr)
        return EXIT_USAGE
    try:
        parse_faults(args.faults, args.nodes, _total_groups(args))
    except FaultError as error:
        print(f"error: --faults: {error}", file=sys.stderr)
        return EXIT_USAGE
    if os.environ.get(INSIDE_ENV) != "1":
        return _enter_namespaces(args, argv if argv is not None else sys.argv[1:])
    return _as_init(lambda: _harness(args))


# -- namespaces ---------------------------------------------------------------------------------

def _enter_namespaces(args: argparse.Namespace, argv: list[str]) -> int:
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    try:
        iptables_binary()
    except NetError:
        missing.append("iptables")
    if missing:
        print(f"error: missing {', '.join(missing)} (apt-get install iproute2 iptables "
              "util-linux)", file=sys.stderr)
        return EXIT_USAGE
    unshare = ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
               "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.insert(1, "--map-root-user")
    probe = subprocess.run([*unshare, "--", "ip", "link", "add", "probe0", "type", "bridge"],
                           capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        print("=" * 78 + "\nSKIPPED: jepsen-style needs private network, mount and pid "
              "namespaces and cannot make them here:\n  " + (probe.stderr.strip() or
                                                          f"exit {probe.returncode}")
              + "\nRun it as root (or where user namespaces are enabled).\n" + "=" * 78,
              file=sys.stderr)
        return EXIT_NO_NAMESPACES
    if "--seed" not in " ".join(argv):
        argv = [*argv, "--seed", str(args.seed)]
    env = {**os.environ, INSIDE_ENV: "1"}
    inner = subprocess.Popen([*unshare, "--", sys.executable, "-m", "jepsen.main", *argv],
                             env=env)
    while True:
        try:
            return inner.wait()
        except KeyboardInterrupt:
            continue  # the inner harness got the same SIGINT and is tearing down


def _as_init(harness: Any) -> int:
    """As pid 1 of the private pid namespace: run the harness in a child and reap every orphan
    (agents' task wrappers re-parent here when an agent is killed). When this returns, the
    kernel kills whatever is left in the namespace."""
    if os.getpid() != 1:
        return int(harness())
    child = os.fork()
    if child == 0:
        code = EXIT_VIOLATION
        try:
            code = int(harness())
        except BaseException:  # a bug in the harness: show it, then end the namespace
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness gets it from the terminal

    def forward(number: int, _frame: FrameType | None) -> None:
        os.kill(child, number)

    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return EXIT_VIOLATION
        if pid == child:
            return os.waitstatus_to_exitcode(status)


# -- the run ------------------------------------------------------------------------------------

def _harness(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    kinds = parse_faults(args.faults, args.nodes, _total_groups(args))
    root, agents = _prepare(args, kinds)
    outcome = _run(args, root, agents, kinds)
    if outcome.failure == "interrupted":
        return 130
    return _report(args, root, outcome)


@dataclass
class _Outcome:
    """What a run leaves for the report: why the harness itself failed (None: it did not) and
    the faults the nemesis injected."""

    failure: str | None = None
    injected: dict[str, int] = field(default_factory=dict)


def _prepare(args: argparse.Namespace,
             kinds: tuple[str, ...]) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The results directory (with the empty ledger and meta.json) and the agents' capacity."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root = (args.results or HERE / "results" / f"{stamp}-seed{args.seed}").resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "ledger.txt").touch()
    agents = {f"c{i}": dict(AGENT_CAPACITY) for i in range(args.agents)}
    meta = {"seed": args.seed, "nodes": args.nodes, "agents": agents, "clients": args.clients,
            "time_s": args.time, "faults": list(kinds), "lost_after_s": args.lost_after_s,
            "suspect_after_s": args.suspect_after_s, "liveness_bound_s": args.liveness_bound_s,
            "hostile_cluster": HOSTILE_CLUSTER, "started": stamp, "argv": sys.argv[1:]}
    if _total_groups(args) > 1:
        meta["groups"] = _total_groups(args)
    if args.grow:
        meta["grow"] = True
    groups = f" in each of {_total_groups(args)} groups" if _total_groups(args) > 1 else ""
    if args.grow:
        groups += f" (the last joining: {args.groups} -> {args.groups + 1})"
    (root / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    _say(f"jepsen-style: seed {args.seed}, {args.nodes} replicas{groups}, {args.agents} agents, "
         f"{args.clients} clients, {args.time:g} s, faults {','.join(kinds)}\n"
         f"  results: {root}")
    return root, agents


def _run(args: argparse.Namespace, root: Path, agents: dict[str, dict[str, Any]],
         kinds: tuple[str, ...]) -> _Outcome:
    """Start the network and the cluster, exercise them, and always tear both down."""
    history = History(root / "history.jsonl")
    net: Net | None = None
    cluster: ClusterUnderTest | None = None
    stop = threading.Event()
    outcome = _Outcome()
    try:
        net = Net()
        cluster = ClusterUnderTest(root, net, args.nodes, agents, args.suspect_after_s,
                                   args.lost_after_s, groups=_total_groups(args),
                                   joining=args.grow)
        _exercise(args, root, cluster, net, history, kinds, stop, outcome)
    except KeyboardInterrupt:
        outcome.failure = "interrupted"
        _say("interrupted: tearing down")
    except (RuntimeError, NetError, OSError) as error:
        outcome.failure = str(error)
        _say(f"error: {error}")
    finally:
        stop.set()
        if cluster is not None:
            cluster.stop()
        _kill_strays()
        if net is not None:
            net.close()
        _copy_agent_events(root, history)
        history.close()
    return outcome


def _exercise(args: argparse.Namespace, root: Path, cluster: ClusterUnderTest, net: Net,
              history: History, kinds: tuple[str, ...], stop: threading.Event,
              outcome: _Outcome) -> None:
    """Bring the cluster up, run the clients and the nemesis for the run's time, heal, then
    wait for liveness and take the final reads (into `history`; failures into `outcome`)."""
    cluster.start()
    leaders = [cluster.wait_leader(STARTUP_TIMEOUT_S, group)
               for group in range(cluster.groups)]
    if None in leaders or not cluster.wait_agents_ready(STARTUP_TIMEOUT_S):
        raise RuntimeError(f"the cluster did not come up within {STARTUP_TIMEOUT_S:g} s "
                           f"(logs in {root / 'logs'})")
    leader = leaders[0]
    _say(f"  cluster up: leader {', '.join(map(str, leaders))}, agents READY")
    history.event("harness", "start", {"leader": leader} if cluster.groups == 1
                  else {"leader": leader, "leaders": leaders})
    groups = [cluster.group_servers(g) for g in range(cluster.groups)] \
        if cluster.groups > 1 else []
    schedules = create_schedules(list(cluster.grpc.values()), history, cluster.user_tls,
                                 cluster.admin_token, groups=groups)
    _say(f"  schedules: {', '.join(schedules) or 'none could be created'}")
    workers = [ClientWorker(i, list(cluster.grpc.values()), history, root / "ledger.txt",
                            args.seed, stop, cluster.user_tls, token=cluster.admin_token,
                            groups=groups, grow=args.grow)
               for i in range(args.clients)]
    nemesis = Nemesis(cluster, history, kinds, args.seed, stop)
    grower = Grower(cluster, history, args.seed, args.time, stop) if args.grow else None
    for worker in workers:
        worker.start()
    nemesis.start()
    if grower is not None:
        grower.start()
    _progress(args.time, workers, nemesis, stop)
    stop.set()
    if not nemesis.join(JOIN_TIMEOUT_S):
        outcome.failure = "the nemesis did not stop"
    if grower is not None and not grower.join(JOIN_TIMEOUT_S):
        outcome.failure = "the grower did not stop"
    for worker in workers:
        if not worker.join(JOIN_TIMEOUT_S):
            outcome.failure = f"client {worker.process} did not stop"
    outcome.injected = nemesis.injected
    errors = [w.error for w in workers if w.error] + ([nemesis.error] if nemesis.error else []) \
        + ([grower.error] if grower is not None and grower.error else [])
    if errors:
        outcome.failure = f"harness thread failed: {errors[0]!r}"
    _heal(cluster, net, workers, history)
    if grower is not None:
        grower.finish()
        _say(f"  grow: {'done' if grower.done else 'NOT done'} after {grower.tries} tries")
        if not grower.done:
            outcome.failure = "the shards did not move to the joining group (see the grow " \
                              "events in history.jsonl)"
    _say(f"  healed at {history.now():.1f} s; waiting up to {args.liveness_bound_s:g} s "
         "for every acknowledged job to finish")
    acked = sorted({job for w in workers for job in w.acked.values()})
    _liveness(cluster, history, acked, args.liveness_bound_s)
    _final(cluster, history)


def _total_groups(args: argparse.Namespace) -> int:
    """The scheduler groups started: --groups, and one joining with --grow."""
    return int(args.groups) + (1 if args.grow else 0)


def _report(args: argparse.Namespace, root: Path, outcome: _Outcome) -> int:
    """Check the run's results, write and print the table, and say the exit status."""
    try:
        report = checker_mod.check(root)
    except checker_mod.CheckError as error:
        _say(f"error: the results in {root} cannot be checked: {error}")
        return EXIT_VIOLATION
    table = format_table(args, root, outcome.injected, report, outcome.failure)
    (root / "results.txt").write_text(table + "\n")
    (root / "report.json").write_text(json.dumps(checker_mod.report_json(report), indent=2,
                                                 default=str) + "\n")
    if args.json:
        print(json.dumps({"seed": args.seed, "results": str(root),
                          "harness_failure": outcome.failure,
                          "faults_injected": outcome.injected,
                          "report": checker_mod.report_json(report)}, default=str))
    else:
        print(table)
    if outcome.failure is not None or report.violations:
        return EXIT_VIOLATION
    return EXIT_OK if report.liveness_met else EXIT_LIVENESS


def _heal(cluster: ClusterUnderTest, net: Net, workers: list[ClientWorker],
          history: History) -> None:
    """End every fault, then cancel the long jobs the clients left running."""
    net.heal()
    touched = cluster.ensure_running()
    history.event("harness", "heal", {"restarted_or_resumed": touched})
    left = [job for worker in workers for job in worker.cancel_outstanding()]
    history.event("harness", "cleanup", {"long_jobs_not_cancelled": left})


def _interrupt(_number: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _progress(run_s: float, workers: list[ClientWorker], nemesis: Nemesis,
              stop: threading.Event) -> None:
    start = time.monotonic()
    while True:
        left = run_s - (time.monotonic() - start)
        if left <= 0:
            return
        if stop.wait(min(PROGRESS_EVERY_S, left)):
            return
        acked = sum(len(w.acked) for w in workers)
        faults = sum(nemesis.injected.values())
        _say(f"  [{time.monotonic() - start:5.0f}/{run_s:g} s] jobs acknowledged {acked}, "
             f"faults {faults}")


def _liveness(cluster: ClusterUnderTest, history: History, acked: list[str],
              bound_s: float) -> None:
    start = time.monotonic()
    pending = set(acked)
    client = cluster.client(timeout_s=2.0, retry_budget_s=2.0)
    try:
        while pending and time.monotonic() - start < bound_s:
            for job_id in sorted(pending):
                try:
                    if client.get_job(job_id).state in TERMINAL_JOB_STATES:
                        pending.discard(job_id)
                except RaftschedError:
                    break  # an election: poll again
            if pending:
                time.sleep(LIVENESS_POLL_S)
    finally:
        client.close()
    waited = time.monotonic() - start
    history.event("harness", "liveness", {"bound_s": bound_s, "waited_s": round(waited, 3),
                                          "met": not pending, "pending": sorted(pending),
                                          "acknowledged": len(acked)})
    _say(f"  liveness: {len(acked) - len(pending)}/{len(acked)} acknowledged jobs terminal "
         f"after {waited:.1f} s")


def _final(cluster: ClusterUnderTest, history: History) -> None:
    """Wait (bounded) until the replicas have applied the same entries, then record each one's
    applied index and state digest."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    statuses: dict[str, Any] = {}
    while True:
        statuses = {name: cluster.status(name, include_digest=True) for name in cluster.replicas}
        indices = {(cluster.group_of[name], s.state_index) for name, s in statuses.items()
                   if s is not None}  # each group's replicas converge on its own index
        if (len(indices) == cluster.groups and None not in statuses.values()) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    history.event("harness", "final", {"replicas": [
        {**({"name": name, "applied_index": s.applied_index, "state_index": s.state_index,
             "state_digest": s.state_digest, "term": s.term,
             "applied_log": f"replicas/{name}/applied.log"}
            if s is not None else {"name": name, "unreachable": True,
                                   "applied_log": f"replicas/{name}/applied.log"}),
         **({"group": cluster.group_of[name]} if cluster.groups > 1 else {})}
        for name, s in statuses.items()]})


def _copy_agent_events(root: Path, history: History) -> None:
    """The agents' events (registrations, attempt starts and ends with their fences, stale-fence
    rejections, report verdicts) into the history, in each agent's log order. Their `ts` is that
    agent's wall clock (seconds); ledger.txt holds the real-time order of executions."""
    for event in checker_mod.agent_events(root / "logs"):
        cluster_id = event.pop("cluster")
        history.event(f"agent:{cluster_id}", "agent", event)


def _kill_strays() -> None:
    """Inside our private pid namespace every other process is one we started (agents' task
    wrappers, tasks): kill what is left so the ledger is final before the check."""
    if os.getppid() != 1:
        return  # not in the harness's own pid namespace: only our children were signalled
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, me):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)
    time.sleep(0.2)  # pid 1 reaps them


def format_table(args: argparse.Namespace, root: Path, injected: dict[str, int],
                 report: Any, failure: str | None) -> str:
    return checker_mod.format_table(report, seed=args.seed, nodes=args.nodes,
                                    time_s=args.time, injected=injected, results=root,
                                    harness_failure=failure, groups=_total_groups(args))


if __name__ == "__main__":
    sys.exit(main())
