"""`raftsched admin status|add-replica|remove-replica|remove-cluster|drain|undrain|
tenant set|list|token create|list|revoke|cert revoke|list|groups show|add|snapshot save|inspect`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any

from raftsched import limits
from raftsched.cli import render
from raftsched.cli.certs import register_certs
from raftsched.cli.common import (
    CONNECTION,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    ClientLike,
    Subparsers,
    command_parser,
    connect,
    free_text,
    print_json,
    unknown_outcome,
)
from raftsched.cli.groups import register_groups
from raftsched.cli.snapshot import register_snapshot
from raftsched.environment import TOKEN_ENV
from raftsched.errors import Code, RaftschedError
from raftsched.options import address, integer

# --- admin ----------------------------------------------------------------------------------------


def register_admin(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    admin = commands.add_parser(
        "admin", help="replicas, leadership, compute clusters, membership",
        description="Operate the scheduler: raftsched admin status|add-replica|remove-replica|"
                    "remove-cluster|drain|undrain|tenant|token|cert|groups|snapshot.")
    sub = admin.add_subparsers(title="admin commands", metavar="COMMAND", required=True)
    parents = [common, CONNECTION]

    _register_status(sub, parents)

    _register_membership(sub, parents)
    gone = command_parser(
        sub, "remove-cluster", parents, "forget a decommissioned compute cluster",
        "Forget compute cluster CLUSTER_ID (its history stays in the tasks' attempts). Refused "
        "while it has live attempts or unconfirmed kill directives: stop its agent first and "
        "wait until the cluster is LOST and its attempts are replaced or confirmed dead, or "
        "cancel their jobs. An agent that registers again under that id brings it back (to keep "
        "a compromised agent out, revoke its certificate: admin cert revoke).",
        'output:\n  "removed cluster CLUSTER_ID"\n  --json: {"cluster_id"}')
    gone.add_argument("cluster_id", metavar="CLUSTER_ID")
    gone.set_defaults(handler=_run_remove_cluster)
    _register_drain(sub, parents)
    _register_tenants(sub, parents)
    _register_tokens(sub, parents)
    register_certs(sub, parents)
    register_groups(sub, parents)
    register_snapshot(sub, common)


def _register_status(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    status = command_parser(
        sub, "status", parents, "who leads, the replicas and the compute clusters",
        "Ask one replica what it sees (--server; else the leader, found through the first "
        "replica that answers): the leader and "
        "term, the Raft members, the commit index, and every compute cluster with its status, "
        "capacity and what is reserved on it.",
        "output:\n  the leader line, a table of replicas, a table of compute clusters\n"
        '  --json: {"leader", "term", "replicas": [{"raft_address", "grpc_address", "leader"}],'
        '\n           "clusters": [{"cluster", "status", "capabilities", "capacity", "reserved",'
        ' "draining",\n             "drain_reason", "degraded_until_ms", "reserved_for",'
        ' "pending_kills",\n             "kills_unrecorded", "reported_free" (the leader\'s'
        ' answer only, else null), "queue_depth",\n             "queued" (late binding: '
        'attempts held in its agent\'s queue), ...}],'
        '\n           "tenants": [{"tenant", "weight", "max_queued", "max_running", "queued",'
        ' "running", ...}],\n           "queued_total", "max_queued_tasks", "now_ms",'
        '\n           "commit_index", "applied_index", "responder", "state_index",'
        '\n           "state_digest" (with --digest, else "")}')
    status.add_argument("--server", type=address, metavar="HOST:PORT",
                        help="ask this replica only (its view may differ from the leader's)")
    status.add_argument("--digest", action="store_true",
                        help="also print the replica's state digest (a hash of its whole state at "
                             "state_index, to compare replicas; it costs the replica a pass over "
                             "its state, so do not poll with it)")
    status.set_defaults(handler=_run_admin_status, reads_only=True)


def _register_membership(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    add = command_parser(
        sub, "add-replica", parents, "add a replica to the Raft cluster",
        "Add a replica (already started with --peers naming the current members) to the Raft "
        "membership. One change at a time, and only a safe one: refused while any current "
        "member is not live or when nothing listens at RAFT_ADDR; the new replica must then "
        "catch up within 30 s or it is removed again (the command waits for that, up to a "
        "minute).",
        'output:\n  "added RAFT_ADDR; members: ..."\n  --json: {"raft_address", "members": [...]}')
    add.add_argument("raft_address", type=address, metavar="RAFT_ADDR",
                     help="the new replica's Raft address")
    add.add_argument("--grpc", type=address, default=None, metavar="GRPC_ADDR",
                     help="the new replica's gRPC address (for redirects and status)")
    add.set_defaults(handler=_run_admin_add)

    remove = command_parser(
        sub, "remove-replica", parents, "remove a replica from the Raft cluster",
        "Remove a replica from the Raft membership. The leader cannot remove itself: stop that "
        "replica first (another one is elected), then remove it as a dead member. Refused when "
        "the live members left would not be a majority of the new membership (remove the dead "
        "replica, not a live one).",
        'output:\n  "removed RAFT_ADDR; members: ..."\n  --json: {"raft_address", "members": '
        '[...]}')
    remove.add_argument("raft_address", type=address, metavar="RAFT_ADDR")
    remove.set_defaults(handler=_run_admin_remove)


def _register_drain(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    drain = command_parser(
        sub, "drain", parents, "stop new placements on a compute cluster",
        "Stop placing new tasks on compute cluster CLUSTER_ID (admin role). What runs there "
        "runs on to its end; tasks pinned to it wait (`task explain` says why). Kept in the "
        "replicated state: it survives leader changes and the agent's restarts.",
        'output:\n  "draining CLUSTER_ID"\n  --json: {"cluster_id", "draining": true, "changed"}')
    drain.add_argument("cluster_id", metavar="CLUSTER_ID")
    drain.add_argument("--reason", default="", type=free_text,
                       help="why (printable text; shown by status and task explain)")
    drain.set_defaults(handler=_run_drain, drain=True)
    undrain = command_parser(
        sub, "undrain", parents, "resume new placements on a drained compute cluster",
        "Resume placing new tasks on compute cluster CLUSTER_ID (admin role).",
        'output:\n  "undrained CLUSTER_ID"\n  --json: {"cluster_id", "draining": false, '
        '"changed"}')
    undrain.add_argument("cluster_id", metavar="CLUSTER_ID")
    undrain.set_defaults(handler=_run_drain, drain=False, reason="")


def _run_drain(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.drain_cluster(args.cluster_id, args.drain, args.reason)
    if args.json:
        print_json({"cluster_id": reply.cluster_id, "draining": reply.draining,
                    "changed": reply.changed})
    else:
        verb = "draining" if reply.draining else "undrained"
        print(f"{verb} {reply.cluster_id}" + ("" if reply.changed else " (it already was)"))
    return EXIT_OK


_TASK_LIMIT = integer(0, limits.MAX_TASKS_IN_STATE, "0: no limit of its own")


def _register_tenants(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    tenant = sub.add_parser(
        "tenant", help="tenants' fair-share weights and queue limits",
        description="Tenants share the compute clusters by weighted dominant-resource fair "
        "share: under contention each tenant's largest share of the cpu, memory or gpu in use "
        "goes as its weight. Limits bound what one tenant may queue (a submit past them is "
        "refused RESOURCE_EXHAUSTED, exit 2, with a retry-after hint) and run at once. Kept "
        "in the replicated state; the tenant '*' holds the defaults of every tenant without "
        "a policy of its own.")
    commands = tenant.add_subparsers(title="tenant commands", metavar="COMMAND", required=True)
    setting = command_parser(
        commands, "set", parents, "set a tenant's weight and limits (admin role)",
        "Set TENANT's fair-share weight and limits; an option left out keeps its current "
        "value. Lowering a limit refuses nothing already accepted: queued tasks stay queued, "
        "running ones run on; it bounds what comes next.",
        'output:\n  the tenant line\n  --json: {"tenant", "weight", "max_queued", '
        '"max_running", "configured", "queued",\n           "running", "reserved", '
        '"dominant_share", "changed"}')
    setting.add_argument("tenant", metavar="TENANT", help="a tenant name, or '*' for defaults")
    setting.add_argument("--weight", type=integer(1, limits.MAX_TENANT_WEIGHT), metavar="W",
                         help=f"fair-share weight, 1..{limits.MAX_TENANT_WEIGHT} (default 1)")
    setting.add_argument("--max-queued", type=_TASK_LIMIT, metavar="N",
                         help="tasks it may have queued (pending, runnable, backing off) at "
                              "once; 0 = no limit of its own")
    setting.add_argument("--max-running", type=_TASK_LIMIT, metavar="N",
                         help="tasks it may have placed (assigned or running) at once; 0 = no "
                              "limit of its own")
    setting.set_defaults(handler=_run_tenant_set)
    listing = command_parser(
        commands, "list", parents, "every tenant's policy and what it holds",
        "List the tenants with a policy or with work: weight, limits, tasks queued and "
        "running, and the weighted dominant share of the ready clusters they hold.",
        'output:\n  a table\n  --json: {"tenants": [{"tenant", "weight", "max_queued", '
        '"max_running", "configured",\n           "queued", "running", "reserved", '
        '"dominant_share"}], "queued_total", "max_queued_tasks"}')
    listing.set_defaults(handler=_run_tenant_list, reads_only=True)


def _run_tenant_set(args: argparse.Namespace) -> int:
    if args.weight is None and args.max_queued is None and args.max_running is None:
        raise RaftschedError(Code.INVALID_ARGUMENT, "nothing to set: give --weight, "
                                                    "--max-queued or --max-running")
    with connect(args) as client:
        reply = client.set_tenant(args.tenant, weight=args.weight, max_queued=args.max_queued,
                                  max_running=args.max_running)
    document = render.tenant_doc(reply) | {"changed": reply.changed}
    if args.json:
        print_json(document)
    else:
        print(render.tenants_table([document])
              + ("" if reply.changed else "\n(unchanged: it already was so)"))
    return EXIT_OK


def _run_tenant_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.list_tenants()
    tenants = [render.tenant_doc(t) for t in reply.tenants]
    if args.json:
        print_json({"tenants": tenants, "queued_total": reply.queued_total,
                    "max_queued_tasks": reply.max_queued_tasks})
    else:
        print(render.tenants_table(tenants) if tenants else "no tenants yet")
        print(f"queued tasks {reply.queued_total} of at most {reply.max_queued_tasks} "
              "(MAX_QUEUED_TASKS)")
    return EXIT_OK


def _run_remove_cluster(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.remove_cluster(args.cluster_id)
    if args.json:
        print_json({"cluster_id": reply.cluster_id})
    else:
        print(f"removed cluster {reply.cluster_id}")
    return EXIT_OK


def _register_tokens(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    token = sub.add_parser(
        "token", help="API tokens: who may do what, for which tenant",
        description="API tokens (admin role needed). A token has a role — user (submit, read and "
        "cancel jobs), operator (also admin status), admin (also membership and tokens) — and "
        "a tenant ('*': every tenant); a token of one tenant sees and touches only that "
        "tenant's jobs. Operator and admin tokens are of tenant '*' (one of another tenant, "
        "made by an older version, acts as a user). Callers pass it with --token or "
        f"${TOKEN_ENV}.")
    commands = token.add_subparsers(title="token commands", metavar="COMMAND", required=True)
    create = command_parser(
        commands, "create", parents, "make a token (its secret is shown once)",
        "Make a token for TENANT with ROLE. The replicas keep only a hash of its secret: the "
        "token printed here cannot be shown again; hand it to its holder. With several "
        "scheduler groups the token is made here and created in every group (by its id and "
        "hash; if a group refuses, it is revoked again in the others and the error says so).",
        'output:\n  "token TOKEN_ID (ROLE, tenant TENANT): rst_..."\n'
        '  --json: {"token_id", "token", "tenant", "role"}')
    create.add_argument("--tenant", required=True,
                        help="the tenant it acts for; '*' for every tenant (operator and admin "
                             "tokens: '*' only)")
    create.add_argument("--role", required=True, choices=("user", "operator", "admin"))
    create.add_argument("--note", default="", type=free_text,
                        help="who or what holds it (shown by token list)")
    create.set_defaults(handler=_run_token_create)
    listing = command_parser(
        commands, "list", parents, "every token (never their secrets)",
        "List the tokens: id, role, tenant, note, when made. A role shown as 'admin -> user' "
        "is an operator or admin token of one tenant, made by an older version: it acts as a "
        "user of its tenant (revoke it, make a '*' one if it is needed).",
        'output:\n  a table\n  --json: [{"token_id", "tenant", "role", "acts_as", "note", '
        '"created_ms"}]')
    listing.set_defaults(handler=_run_token_list, reads_only=True)
    revoke = command_parser(
        commands, "revoke", parents, "revoke a token at once",
        "Revoke TOKEN_ID: calls with it are refused from the moment the revocation commits "
        "(the last admin token cannot be revoked).",
        'output:\n  "revoked TOKEN_ID"\n  --json: {"token_id"}')
    revoke.add_argument("token_id", metavar="TOKEN_ID")
    revoke.set_defaults(handler=_run_token_revoke)


def _run_token_create(args: argparse.Namespace) -> int:
    with connect(args) as client:
        try:
            reply = client.create_token(args.tenant, args.role, args.note)
        except RaftschedError as error:
            raise unknown_outcome(error, "making the token",
                                  "check with `raftsched admin token list`; an unknown token "
                                  "made meanwhile is harmless (revoke it)") from None
    if args.json:
        print_json({"token_id": reply.token_id, "token": reply.token, "tenant": args.tenant,
                    "role": args.role})
    else:
        print(f"token {reply.token_id} ({args.role}, tenant {args.tenant}): {reply.token}")
    return EXIT_OK


def _run_token_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.list_tokens()
    rows = [{"token_id": t.token_id, "tenant": t.tenant, "role": t.role,
             "acts_as": t.acts_as or t.role, "note": t.note, "created_ms": t.created_ms}
            for t in reply.tokens]
    if args.json:
        print_json(rows)
    else:
        print(render.table(["TOKEN", "ROLE", "TENANT", "CREATED", "NOTE"],
                           [[r["token_id"], r["role"] if r["acts_as"] == r["role"]
                             else f"{r['role']} -> {r['acts_as']}", r["tenant"],
                             render.format_time_ms(r["created_ms"]), r["note"]] for r in rows]))
    return EXIT_OK


def _run_token_revoke(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.revoke_token(args.token_id)
    if args.json:
        print_json({"token_id": reply.token_id})
    else:
        print(f"revoked {reply.token_id}")
    return EXIT_OK


def _run_admin_status(args: argparse.Namespace) -> int:
    """One group: its status, with "groups" holding that one group's leader and replicas.
    Several: {"groups": [each group's status, or its error]}; a group that did not answer is
    named (its jobs wait; the others go on) and the exit status is 3."""
    server: str | None = args.server
    servers = [server] if server and not args.servers else None
    with connect(args, servers) as client:
        statuses = getattr(client, "group_statuses", None)
        if server is None and statuses is not None:
            return _print_group_statuses(args, statuses(args.digest))
        status = client.cluster_status(server=server, include_digest=args.digest)
        if server is None and status.leader and status.leader != status.responder:
            with contextlib.suppress(RaftschedError):  # the first answer will do
                status = client.cluster_status(server=status.leader, include_digest=args.digest)
        document = render.cluster_status_doc(status)
    document["groups"] = [{"group": 0, "leader": document["leader"], "term": document["term"],
                           "replicas": document["replicas"]}]
    if args.json:
        print_json(document)
    else:
        print(render.cluster_status_text(document))
    return EXIT_OK


def _print_group_statuses(args: argparse.Namespace, statuses: list[Any]) -> int:
    groups: list[dict[str, Any]] = []
    for group, status in enumerate(statuses):
        if isinstance(status, RaftschedError):
            groups.append({"group": group, "error": {"code": status.code.value,
                                                     "message": status.message}})
        else:
            groups.append({"group": group, **render.cluster_status_doc(status)})
    down = [g["group"] for g in groups if "error" in g or not g.get("leader")]
    if args.json:
        print_json({"groups": groups})
    else:
        blocks = []
        for doc in groups:
            if "error" in doc:
                blocks.append(f"== group {doc['group']}: NOT ANSWERING, the other groups go "
                              f"on\n{doc['error']['code']}: {doc['error']['message']}")
            else:
                headline = "" if doc["leader"] else (": NO LEADER (no quorum?); its jobs wait, "
                                                     "the other groups go on")
                blocks.append(f"== group {doc['group']}{headline}\n"
                              f"{render.cluster_status_text(doc)}")
        print("\n\n".join(blocks))
    if down:
        print(f"error: {len(down)} of {len(groups)} scheduler groups have no leader or did not "
              "answer: "
              f"{', '.join(f'group {g}' for g in down)}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return EXIT_OK


def _run_admin_add(args: argparse.Namespace) -> int:
    return _change_membership(args, "added", lambda client: client.add_replica(
        args.raft_address, args.grpc or ""))


def _run_admin_remove(args: argparse.Namespace) -> int:
    return _change_membership(args, "removed",
                              lambda client: client.remove_replica(args.raft_address))


def _change_membership(args: argparse.Namespace, verb: str,
                       change: Callable[[ClientLike], Any]) -> int:
    with connect(args, one_group=True) as client:
        try:
            reply = change(client)
        except RaftschedError as error:
            raise unknown_outcome(error, "the membership change",
                                   "check the members with `raftsched admin status` before "
                                   "retrying") from None
    members = list(reply.members)
    if args.json:
        print_json({"raft_address": args.raft_address, "members": members})
    else:
        print(f"{verb} {args.raft_address}; members: {', '.join(members)}")
    return EXIT_OK
