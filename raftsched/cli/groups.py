"""`raftsched admin groups show|add`: the shard map of a deployment of several scheduler
groups, and adding a group to a running one (docs/scale-out.md §5)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raftsched import limits
from raftsched.cli.common import EXIT_OK, Subparsers, command_parser, connect, print_json
from raftsched.errors import Code, RaftschedError
from raftsched.options import parse_address_list


def register_groups(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    groups = sub.add_parser(
        "groups", help="the scheduler groups' shard map; add a group to a running deployment",
        description="A deployment of several scheduler groups spreads its jobs over "
        f"{limits.VIRTUAL_SHARDS} shards; each group owns some. Adding a group moves shards "
        "to it, in three steps written into every group (docs/scale-out.md §5).")
    commands = groups.add_subparsers(title="groups commands", metavar="COMMAND", required=True)
    show = command_parser(
        commands, "show", parents, "every group's shard map epoch and share",
        "Ask every group for its shard map: its epoch, how many shards it owns, how many move "
        "(their submits wait), and whether it joined and owns none yet. Every group should be "
        "at the same epoch once a move is done.",
        'output:\n  a table\n  --json: {"groups": [{"group", "epoch", "shards", "moving_out", '
        '"moving_in", "joining",\n           "servers"}]}')
    show.set_defaults(handler=_run_show, reads_only=True)
    add = command_parser(
        commands, "add", parents, "move shards to a new group (admin role)",
        "Give a new scheduler group its share of the shards. Start its replicas first, on "
        "empty data dirs, with --group K --groups K+1 --joining (K: the groups there are now) "
        "and --topology listing every group; restart the agents with --servers listing every "
        "group (an agent that served one group: drain its cluster first, so that it runs "
        "nothing); then run this with the deployment's servers "
        "(--servers or $RAFTSCHED_SERVERS) and the new group's. It first gives the new group "
        "group 0's API tokens, tenant policies and revoked certificates (and revokes there "
        "any token group 0 does not hold). Step 1 marks the shards that "
        "move (their submits wait, clients retry), step 2 hands their idempotency keys to the "
        "new group, step 3 makes it their owner. Jobs never move: the old groups keep running "
        "theirs, and clients find them through the shards' former owners. If it stops (a group "
        "without a quorum), run it again: it finishes from where it stopped. Afterwards, give "
        "every replica the new --groups and --topology at its next restart.",
        'output:\n  a line per step, then a summary\n  --json: {"groups", "epoch", "moved", '
        '"keys_imported", "keys_kept", "steps",\n           "policy": {"tokens", '
        '"tokens_revoked", "tenants", "certificates"}, "skipped"}')
    add.add_argument("new_servers", metavar="HOST:PORT,...",
                     help="gRPC addresses of the new group's replicas")
    add.add_argument("--joining-token", metavar="TOKEN",
                     help="the token to give the new group until it holds the deployment's "
                          "tokens (which this command copies to it first): its bootstrap admin "
                          "token, when yours was made after it (default: the same token)")
    add.add_argument("--allow-no-clusters", action="store_true",
                     help="move shards to the new group although no compute cluster is READY "
                          "in it yet (their new jobs are refused as unschedulable until one "
                          "is, unless they allow that)")
    add.set_defaults(handler=_run_add)


def _per_group(client: Any) -> list[Any]:
    return list(getattr(client, "clients", [client]))


def _run_show(args: argparse.Namespace) -> int:
    from raftsched.client.shards import MapView

    with connect(args) as client:
        views = [MapView.of(c.topology()) for c in _per_group(client)]
    rows: list[dict[str, Any]] = [
            {"group": v.group, "epoch": v.epoch, "shards": v.owners.count(v.group),
             "moving_out": sum(1 for s, _ in v.moving if v.owners[s] == v.group),
             "moving_in": sum(1 for _, to in v.moving if to == v.group),
             "joining": not v.owners,
             "servers": list(v.servers[v.group]) if len(v.servers) > v.group else []}
            for v in views]
    if args.json:
        print_json({"groups": rows})
        return EXIT_OK
    print(f"{'GROUP':<6} {'EPOCH':>5} {'SHARDS':>6} {'MOVING OUT':>10} {'MOVING IN':>9}  SERVERS")
    for row in rows:
        shards = "joining" if row["joining"] else str(row["shards"])
        print(f"{row['group']:<6} {row['epoch']:>5} {shards:>6} {row['moving_out']:>10} "
              f"{row['moving_in']:>9}  {','.join(row['servers'])}")
    return EXIT_OK


def _run_add(args: argparse.Namespace) -> int:
    from raftsched.client.shards import MapView, add_group

    try:
        new_servers = parse_address_list(args.new_servers, "HOST:PORT,...")
    except ValueError as error:
        raise RaftschedError(Code.INVALID_ARGUMENT, str(error)) from None
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    joining_args = argparse.Namespace(**{**vars(args), "token": args.joining_token}) \
        if args.joining_token else args
    with connect(args) as deployment, connect(args, new_servers) as new_client, \
            connect(joining_args, new_servers) as joining_client:
        new: Any = new_client
        joining: Any = joining_client
        clients = [c for c in _per_group(deployment)
                   if set(getattr(c, "servers", ())) != set(new_servers)]
        answer = joining.topology()
        view = MapView.of(answer)
        _check_new_group(view, answer, len(clients))
        current = clients[0].topology()
        servers = [list(m.servers) for m in current.members][:len(clients)]
        if len(servers) < len(clients):
            servers = [list(getattr(c, "servers", ())) for c in clients]
        report = add_group([*clients, new], [*servers, new_servers], say,
                           allow_no_clusters=args.allow_no_clusters,
                           joining=joining if args.joining_token else None)
    document = {"groups": report.groups, "epoch": report.epoch, "moved": report.moved,
                "keys_imported": report.keys_imported, "keys_kept": report.keys_kept,
                "steps": report.steps, "policy": report.policy, "skipped": report.skipped}
    if args.json:
        print_json(document)
    else:
        print(f"{report.groups} groups at shard map epoch {report.epoch}: {report.moved} shards "
              f"moved, {report.keys_imported} idempotency keys handed over"
              + (f" ({report.keys_kept} were there already)" if report.keys_kept else ""))
    return EXIT_OK


def _check_new_group(view: Any, answer: Any, groups: int) -> None:
    """The new group must be group `groups` of groups + 1, and joined (or already given the
    map by an earlier run of this command)."""
    if view.group != groups or view.groups != groups + 1:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"the new servers are group {view.group} of {view.groups}; the "
                             f"deployment has {groups} groups, so the new one must be started "
                             f"with --group {groups} --groups {groups + 1} --joining")
    if view.epoch == 0 and not answer.joining:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"group {view.group} was not started with --joining: it owns shards "
                             f"by the rule s mod {view.groups} and may have taken submits in "
                             "them. Start the new group's replicas on empty data dirs with "
                             "--joining")
