"""`scripts/bench scaleout`: the scale-out study of issue 27 in the seeded simulation
(`tests/sim/scaleout.py`): K scheduler groups, each the real state machine, leader and agent
gateway over a log capped at what one group commits here, sharing 1,000 simulated agents that
each run one real agent core per group over one shared executor.

Prints, per K: placements/s and the ratio to K x the one-group rate of the same run (target
≥ 0.8), the agents' utilisation, capacity rejections as a share of placements (target ≤ 5 %),
and the tenants' shares of the slots against their weights (target within ±10 % of each
weight's share) under a contended workload; then that workload again with every agent keeping
a local queue per group (late binding, `--queue-depth`): utilisation up, rejections still rare.
Figures are in simulated time: they do not depend on how fast this machine is, only on the
seed; the wall time it takes does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.groups import OfferRule
from raftsched.limits import MAX_AGENT_QUEUE_DEPTH
from tests.sim.scaleout import AGENTS, SLOTS_PER_AGENT, TENANTS, Figures, Study

TURNS_AGENTS = 20
TURNS_SECONDS = 90.0
PLACEMENT_RATIO_TARGET = 0.8
REJECTION_TARGET = 0.05
SHARE_TOLERANCE = 0.10


def _groups(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of group counts, "
                                         "e.g. 1,2,4") from None
    if not values or any(v < 1 or v > 64 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each group count must be 1..64")
    return values


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be above 0")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench scaleout", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=_groups, default=[1, 2, 4, 8, 16],
                        help="the group counts to run (default 1,2,4,8,16; 1 is always run "
                             "first: it is the one-group rate the others are compared with)")
    parser.add_argument("--agents", type=int, default=AGENTS,
                        help=f"simulated agents, {SLOTS_PER_AGENT} slots each (default {AGENTS:,})")
    parser.add_argument("--seconds", type=_positive, default=2.0,
                        help="simulated seconds measured per run, after a warm-up of two "
                             "task durations (default 2)")
    parser.add_argument("--rule", choices=[r.value for r in OfferRule], default="turn",
                        help="what each group is offered of an agent's free capacity "
                             "(agent/groups.py; default turn)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fairness-groups", type=int, default=4,
                        help="the group count of the contended (fair-share) run; 0 skips it")
    parser.add_argument("--queue-depth", type=int, default=4, metavar="N",
                        help="the agents' local queue (late binding) per group in one more "
                             "contended run at the fairness group count (default 4; 0 skips "
                             "it; the other runs have no queue). Not paced: there a queued "
                             "task costs its log one more item (its QUEUED answer), and the "
                             "log is what the paced rows are bound by")
    parser.add_argument("--turns-agents", type=int, default=TURNS_AGENTS, metavar="N",
                        help="agents of the turns study: the contended run at the fairness "
                             "group count with and without the queue, measured "
                             f"--turns-seconds, to show how the groups share the agents "
                             f"(default {TURNS_AGENTS}; 0 skips it)")
    parser.add_argument("--turns-seconds", type=_positive, default=TURNS_SECONDS, metavar="S",
                        help=f"simulated seconds measured in the turns study (default "
                             f"{TURNS_SECONDS:g}: longer than a turn, TURN_SHARE_S)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args()
    if args.agents < 1:
        parser.error("--agents must be at least 1")
    if args.turns_agents < 0:
        parser.error("--turns-agents must be at least 0 (0 skips the turns study)")
    if not 0 <= args.queue_depth <= MAX_AGENT_QUEUE_DEPTH:
        parser.error(f"--queue-depth must be 0..{MAX_AGENT_QUEUE_DEPTH}")
    logging.disable(logging.WARNING)
    rule = OfferRule(args.rule)
    counts = sorted(set([1, *args.groups]))
    print(f"scale-out study: {args.agents:,} agents x {SLOTS_PER_AGENT} slots, groups {counts}, "
          f"rule {rule.value}, {args.seconds:g} s measured per run (simulated), seed {args.seed}",
          file=sys.stderr)
    runs: list[Figures] = []
    for groups in counts:
        runs.append(_run(Study(groups, args.seed, rule, args.agents), args))
    if args.fairness_groups:
        runs.append(_run(Study(args.fairness_groups, args.seed, rule, args.agents,
                               workload="contended"), args))
    if args.fairness_groups and args.queue_depth:
        runs.append(_run(Study(args.fairness_groups, args.seed, rule, args.agents,
                               workload="contended", queue_depth=args.queue_depth), args))
    turns = [] if not (args.turns_agents and args.fairness_groups) else [
        _run(Study(args.fairness_groups, args.seed, rule, args.turns_agents,
                   workload="contended", queue_depth=depth), args, args.turns_seconds)
        for depth in sorted({0, args.queue_depth})]
    if args.json:
        for figures in runs + turns:
            print(json.dumps(figures.as_dict()))
        return 0
    _table(runs)
    if turns:
        _turns_table(turns, args.turns_agents)
    return 0


def _run(study: Study, args: argparse.Namespace, seconds: float | None = None) -> Figures:
    started = time.monotonic()
    queue = f", queue {study.queue_depth}" if study.queue_depth else ""
    print(f"  {study.workload} K={study.groups}{queue}, {study.agents:,} agents (tasks of "
          f"{study.task_s:g} s) ...", end="", flush=True, file=sys.stderr)
    figures = study.run(seconds or args.seconds)
    print(f" {time.monotonic() - started:.0f} s", file=sys.stderr)
    return figures


def _table(runs: list[Figures]) -> None:
    one = next(f for f in runs if f.groups == 1 and f.workload == "paced"
               and not f.queue_depth)
    weights = sum(TENANTS.values())
    print("| K | workload | task | placements/s | / K x one group | utilisation | capacity "
          "rejections | tenant shares (weights 1:2:3) | groups' placements, least / most | "
          "verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in runs:
        ratio = f.placements_per_s / (f.groups * one.placements_per_s)
        deviation = max(abs(f.tenant_shares[t] / (w / weights) - 1) for t, w in TENANTS.items())
        checks = [f.rejection_rate <= REJECTION_TARGET]
        if f.workload == "paced":
            checks.append(ratio >= PLACEMENT_RATIO_TARGET)
        else:
            checks.append(deviation <= SHARE_TOLERANCE)
        shares = " / ".join(f"{f.tenant_shares[t]:.3f}" for t in TENANTS)
        workload = f"{f.workload}, queue {f.queue_depth}" if f.queue_depth else f.workload
        print(f"| {f.groups} | {workload} | {f.task_s:g} s | {f.placements_per_s:,.0f} | "
              f"{ratio:.2f} | {f.utilisation:.2f} | {f.rejection_rate:.2%} | {shares} "
              f"(off by ≤ {deviation:.1%}) | {_balance(f)} | "
              f"{'met' if all(checks) else 'NOT met'} |")
    print()
    print(f"targets: paced rows / K x one group ≥ {PLACEMENT_RATIO_TARGET}; every row capacity "
          f"rejections ≤ {REJECTION_TARGET:.0%}; the contended rows' tenant shares within "
          f"±{SHARE_TOLERANCE:.0%} of 1/6, 2/6, 3/6. 'queue N': every agent keeps a local queue "
          "of N per group (late binding), started in that group's turn")


def _turns_table(runs: list[Figures], agents: int) -> None:
    print()
    print(f"How {runs[0].groups} groups share the agents under contention ({agents:,} agents, "
          f"{runs[0].seconds:g} s measured):")
    print()
    print("| agents' queue per group | placements per group | least / most | utilisation | "
          "capacity rejections | turns passed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in runs:
        per_group = " / ".join(f"{n:,}" for n in f.per_group_placements)
        print(f"| {f.queue_depth or 'none'} | {per_group} | {_balance(f)} | "
              f"{f.utilisation:.2f} | {f.rejection_rate:.2%} | {f.turn_passes:,} |")


def _balance(figures: Figures) -> str:
    """The least-placing group's placements over the most-placing one's (1.00: every group
    placed alike; with one group, '-')."""
    if figures.groups == 1:
        return "-"
    return f"{min(figures.per_group_placements) / max(1, max(figures.per_group_placements)):.2f}"


if __name__ == "__main__":
    sys.exit(main())
