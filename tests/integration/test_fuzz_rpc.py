"""Integration: every public RPC fuzzed over real gRPC, with a fixed seed, on one real replica.

For every RPC of Scheduler, AgentGateway, Admin and Schedules (enumerated from the API's
descriptor, so a new RPC is fuzzed without a change here), ROUNDS requests are generated from
the RPC's message type: random and boundary values — empty strings, strings one past every char
or byte bound of raftsched/limits.py up to LARGE_SPEC_BYTES (the larger bounds, MAX_SPEC_BYTES
and MAX_MESSAGE_BYTES, have a test each at the end), unicode (combining marks, RTL overrides,
emoji, NUL and other control characters), integers at the bounds of each field's type, repeated
fields up to MAX_BATCH_ITEMS + 1, nested messages filled recursively — and one request in
RAW_EVERY is random bytes instead of a message. Strings are often the real targets (job, task,
cluster and token ids) so calls get past NOT_FOUND, and SubmitJob's spec is often a valid JSON
job spec with a few mutations. AgentGateway calls go over the agent certificate of CLUSTER_ID,
mostly naming it; the others over a user's certificate with the admin token, one in four with a
token of role user for TENANT instead. A user's AgentGateway calls, whatever the cluster_id, are
PERMISSION_DENIED (a test of their own).

Each call must:
- end with a status of ALLOWED, never UNKNOWN, INTERNAL, UNAVAILABLE or DEADLINE_EXCEEDED;
  UNAUTHENTICATED is not allowed either (every call carries a valid certificate and token);
- be readable by a default gRPC client (`readable`: its metadata within 8 KiB);
- leave the replica alive, with no Python traceback and no error event in its log;
- if refused (any code but OK), change nothing.

"Nothing changed" is not `ClusterStatus(include_digest=True).state_digest` alone: the digest
hashes the whole state, its clock included. `fsm.apply_command` moves `state.now_ms` for every
command it applies, rejected ones too (a refused CancelJob of an unknown job is committed, then
rejected at apply), the leader proposes a TICK every second whatever the callers do, and a
cluster's status moves from READY to SUSPECT to LOST with its heartbeat timers. So an unchanged
digest proves that nothing changed (a local read, ~1 ms: most refusals stop there), and a moved
one is looked into: `Fuzz.observe` compares what a caller can change, through the API — every job
(its whole Job message), the tasks of the seeded jobs, every cluster's registration (id,
incarnation, capabilities, capacity, reservations, live attempts, kill directives; not its status
or heartbeat age), the replica members and the tokens. Nothing else moves those here: every task
the fuzzer can submit requires UNPLACEABLE, a capability no registration names, so the leader
never places one, and nothing times out.

What the fuzzer never sends, so it cannot change the cluster for real: AddReplica and
RemoveReplica with a member's address (nor AddReplica with any well-formed address, which would
be probed and, if something listened there, added), and RevokeToken with the id of the admin or
the TENANT token. CreateToken may run into MAX_TOKENS (RESOURCE_EXHAUSTED is allowed). A
Heartbeat on the registered incarnation waits at most MAX_FUZZ_LONG_POLL_MS (the server's own cap
is MAX_LONG_POLL_MS, 5 s).

A failure names the seed, the RPC, the round and the request. Each RPC draws from its own
`random.Random(f"{SEED}/{rpc}")`, so the whole file run again with that seed sends the same
requests (ids the replica draws, such as job ids, are picked from the same positions). A longer
hunt, e.g.:
    RAFTSCHED_FUZZ_ROUNDS=2000 RAFTSCHED_FUZZ_SEED=$RANDOM pytest tests/integration/test_fuzz_rpc.py
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor, message_factory, text_format
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from raftsched import limits, options, rpc, tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import RaftschedError
from raftsched.eventlog import read_events
from raftsched.replica.identity import Rule, rule_of
from raftsched.replica.raft import membership
from raftsched.tokens import parse_token
from tests.support.cluster import LocalCluster, running, with_token

pytestmark = [pytest.mark.integration]

SEED = int(os.environ.get("RAFTSCHED_FUZZ_SEED", "20240607"))
ROUNDS = int(os.environ.get("RAFTSCHED_FUZZ_ROUNDS", "40"))
"""Generated requests per RPC (CI runs the default)."""
RAW_EVERY = 8
"""One request in this many is random bytes, not a generated message."""
CALL_TIMEOUT_S = 10.0
MAX_FUZZ_LONG_POLL_MS = 50
MAX_DEPTH = 4
"""Nested messages deeper than this are left empty."""
CLUSTER_ID = "fuzz-east"
UNPLACEABLE = "fuzz-unplaceable-9c41e7"
"""A capability every fuzzed task requires and no registration ever names."""
SEEDED_TASKS = ("a", "b", "c")
MANY_MUTATIONS = limits.MAX_REPORTED_SPEC_ISSUES + 5
TENANT = "fuzz"
"""The tenant of the second user token: one call in four of Scheduler and Admin uses it."""
NOT_MEMBERS = ("127.0.0.1:1", "localhost:65535", "[::1]:9", "replica-9.invalid:7000")
"""Well-formed replica addresses that are no member's (RemoveReplica: NOT_FOUND)."""

SERVICES = [pb.DESCRIPTOR.services_by_name[name] for name in ("Scheduler", "AgentGateway",
                                                              "Admin", "Schedules")]
METHODS = [pytest.param(service, method, id=f"{service.name}.{method.name}")
           for service in SERVICES for method in service.methods]
GATEWAY = pb.DESCRIPTOR.services_by_name["AgentGateway"]
CLIENT_METADATA_BYTES = 8 * 1024
"""The metadata of an answer a gRPC client reads by default (grpc.max_metadata_size); past it
(at random up to twice as much, then always) it drops the answer and reports RESOURCE_EXHAUSTED."""
CHANNEL_OPTIONS = (*rpc.CHANNEL_OPTIONS, ("grpc.max_metadata_size", 4 * 1024 * 1024),
                   ("grpc.absolute_max_metadata_size", 4 * 1024 * 1024))
"""The fuzzer's channels read far more, so an answer too large for a default client is
received whole and measured (`metadata_bytes`) instead of lost."""
OK = grpc.StatusCode.OK
ALLOWED = frozenset({OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                     grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
                     grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED})
"""The codes a replica answers a request with (the API's error model, raftsched.proto)."""

# --- values ---------------------------------------------------------------------------------------

FD = descriptor.FieldDescriptor
INT_BOUNDS = {
    **dict.fromkeys((FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32, FD.TYPE_ENUM),
                    (-(2**31), 2**31 - 1)),
    **dict.fromkeys((FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64), (-(2**63), 2**63 - 1)),
    **dict.fromkeys((FD.TYPE_UINT32, FD.TYPE_FIXED32), (0, 2**32 - 1)),
    **dict.fromkeys((FD.TYPE_UINT64, FD.TYPE_FIXED64), (0, 2**64 - 1)),
}
LONG_LENGTHS = sorted({value + 1 for name, value in vars(limits).items()
                       if name.endswith(("_CHARS", "_BYTES")) and isinstance(value, int)
                       and value <= limits.LARGE_SPEC_BYTES} | {options.MAX_HOST_CHARS + 1})
"""One past every char or byte bound up to LARGE_SPEC_BYTES (129, 257, ..., 65537, 262145)."""
LONG_UNITS = ("a", "9", "\u00e9", "e\u0301", "\U0001f642", "\u202e")
REPEAT_COUNTS = (limits.MAX_CAPABILITIES_PER_CLUSTER + 1, limits.MAX_REQUIRES_PER_TASK + 1,
                 limits.MAX_BATCH_ITEMS + 1)
ODD_STRINGS = (
    "e\u0301\u0302\u0303\u0304", "\u202eevil\u202c", "\u05e9\u05dc\u05d5\u05dd",
    "\u0645\u0631\u062d\u0628\u0627", "\U0001f642", "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\U0001d54f", "\ufeff", "\u200b", "\u00a0", "\u2028", "\u0085", "\x00", "nul\x00inside",
    "\x7f", "\x1b[31mred\x1b[0m", "\r\n", "\t", " ", "\ufffd", "\uffff", "\U0010ffff",
    "\u0130", "\u00df", "\ufb01", "\u00b2", "\u0663", "\uff11\uff12", "../../etc/passwd",
    "%s%n%x", "{0}{!r}", "${HOME}", "$(id)", "'; --", "*", "-1", "0", "9" * 25, "1e309", "NaN",
    "null", "true", "a:b:c", "[::1]:1", "[::1", "host:0", "host:65536", "256.256.256.256:80",
    ":", "127.0.0.1:", "default", "READY", "RUNNABLE", "admin", "user", "operator",
)


def text(rng: random.Random, small: bool = False) -> str:
    """A random string of one of several kinds (all valid UTF-8: no lone surrogates); `small`:
    not one of LONG_LENGTHS."""
    kind = rng.randrange(7)
    if small and kind == 4:
        kind = 1
    if kind == 0:
        return ""
    if kind == 1:
        return rng.choice(ODD_STRINGS)
    if kind == 2:
        return "".join(rng.choice(ODD_STRINGS) for _ in range(rng.randrange(1, 6)))
    if kind == 3:
        return "".join(chr(rng.randrange(32)) for _ in range(rng.randrange(1, 8)))
    if kind == 4:
        length = rng.choice(LONG_LENGTHS)
        return (rng.choice(LONG_UNITS) * length)[:length]
    if kind == 5:
        return str(rng.choice((-1, 0, 2**31, 2**63, 2**64, rng.randrange(10**6))))
    return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 24))
                   ).encode("utf-8", "ignore").decode("utf-8", "ignore") or "x"


def wide_text(rng: random.Random) -> str:
    """A string of a few hundred characters, most often of 2 to 4 UTF-8 bytes each."""
    return rng.choice(LONG_UNITS) * rng.randrange(100, 300) + str(rng.randrange(10**6))


def integer(rng: random.Random, low: int, high: int, known: list[int]) -> int:
    """A boundary or random integer in [low, high], sometimes near a value the state holds."""
    choices = [low, low + 1, high - 1, high, 0, 1, rng.randint(low, high), rng.randrange(1000)]
    if low < 0:
        choices.append(-1)
    if known:
        choices.append(rng.choice(known) + rng.choice((-1, 0, 0, 1)))
    return max(low, min(high, rng.choice(choices)))


def json_value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value (NaN and the infinities too: Python's json reads them)."""
    kind = rng.randrange(8 if depth < 2 else 6)
    if kind == 0:
        return text(rng, small=True)
    if kind == 1:
        return rng.choice((0, 1, -1, 2**31, 2**63, 2**64, 10**30, -(10**30)))
    if kind == 2:
        return rng.choice((0.5, -0.0, 1e-9, 1e308, float("nan"), float("inf"), float("-inf")))
    if kind == 3:
        return rng.choice((True, False))
    if kind == 4:
        return None
    if kind == 5:
        return rng.randrange(200)
    if kind == 6:
        return [json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {text(rng, small=True): json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def job_spec(rng: random.Random) -> str:
    """A JSON job spec: a valid one with a few mutations (a field set to a random value, removed,
    or added), so some are accepted and most others fail one check at a time; now and then
    MANY_MUTATIONS, past MAX_REPORTED_SPEC_ISSUES. Every task, however mutated, requires
    UNPLACEABLE."""
    ids = [f"t{i}" for i in range(rng.choice((1, 1, 2, 3, 40)))]
    job: dict[str, Any] = {"name": f"fuzz-{rng.randrange(10**6)}", "allow_unschedulable": True,
                           "tasks": [job_task(rng, index, ids) for index in range(len(ids))]}
    optional = {"tenant": rng.choice(("default", TENANT)), "priority": rng.randrange(101),
                "failure_policy": rng.choice(("fail_fast", "skip_downstream", "continue")),
                "idempotency_key": f"key-{rng.randrange(10**6)}"}
    for key in rng.sample(sorted(optional), rng.randrange(len(optional) + 1)):
        job[key] = optional[key]
    count = rng.choice((0, 0, 1, 1, 2, 3, MANY_MUTATIONS))
    for _ in range(count):
        mutate(rng, job, wide=count == MANY_MUTATIONS)
    tasks = job.get("tasks")
    for task in tasks if isinstance(tasks, list) else ():
        if isinstance(task, dict):
            requires = task.setdefault("requires", [])
            if isinstance(requires, list) and UNPLACEABLE not in requires:
                requires.insert(0, UNPLACEABLE)
    return json.dumps(job)


def job_task(rng: random.Random, index: int, ids: list[str]) -> dict[str, Any]:
    task: dict[str, Any] = {"id": ids[index], "command": ["mock", f"sleep_ms={index}"],
                            "requires": [UNPLACEABLE]}
    optional = {
        "env": {"FUZZ_VAR": "value"}, "cwd": "/tmp", "cluster": CLUSTER_ID,
        "resources": {"cpu": 0.5, "memory_mb": 64, "gpu": rng.randrange(2)},
        "depends_on": ids[:index][-2:],
        "retry": {"max_attempts": 3, "backoff_s": 1, "multiplier": 2, "backoff_max_s": 60,
                  "jitter": 0.1, "non_retryable_exit_codes": [2]},
        "timeout_s": rng.choice((1, 60)), "on_lost": rng.choice(("replace", "wait")),
        "trigger": rng.choice(("all_success", "all_done")),
    }
    for key in rng.sample(sorted(optional), rng.randrange(len(optional) + 1)):
        task[key] = optional[key]
    return task


def mutate(rng: random.Random, document: dict[str, Any], *, wide: bool = False) -> None:
    """Change one place of `document`: set a key or item to a random value (long strings
    included), remove one, or add an unknown key or an item. `wide`: add an unknown key, a long
    string, most often of wide characters (each refused, and quoted in the refusal)."""
    containers: list[Any] = []
    pending: list[Any] = [document]
    while pending:
        node = pending.pop()
        containers.append(node)
        children = node.values() if isinstance(node, dict) else node
        pending += [child for child in children if isinstance(child, dict | list)]
    if wide:
        dicts = [node for node in containers if isinstance(node, dict)]
        rng.choice(dicts)[wide_text(rng)] = text(rng)
        return
    node = rng.choice(containers)
    action = rng.randrange(3)
    value = text(rng) if rng.random() < 0.3 else json_value(rng)
    if isinstance(node, dict):
        if action == 0 or not node:
            node[text(rng, small=True)] = value
        elif action == 1:
            del node[rng.choice(sorted(node))]
        else:
            node[rng.choice(sorted(node))] = value
    elif action == 0 or not node:
        node.append(value)
    elif action == 1:
        del node[rng.randrange(len(node))]
    else:
        node[rng.randrange(len(node))] = value


# --- requests -------------------------------------------------------------------------------------


@dataclass
class Targets:
    """Values the replica holds, for the fuzzer to aim at (field name -> values)."""

    strings: dict[str, list[str]] = field(default_factory=dict)
    integers: list[int] = field(default_factory=list)

    def add(self, name: str, value: str) -> None:
        values = self.strings.setdefault(name, [])
        if value not in values:
            values.append(value)


def fill(message: Any, rng: random.Random, targets: Targets, depth: int = 0,
         small: bool = False) -> Any:
    """`message` with a random subset of its fields set to random or boundary values; `small`:
    no long strings or lists (for the copies that make up a long list)."""
    for field_descriptor in message.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue
        if field_descriptor.is_repeated:
            fill_repeated(message, field_descriptor, rng, targets, depth, small)
        elif field_descriptor.type == FD.TYPE_MESSAGE:
            if depth < MAX_DEPTH:
                fill(getattr(message, field_descriptor.name), rng, targets, depth + 1, small)
        else:
            setattr(message, field_descriptor.name, scalar(field_descriptor, rng, targets, small))
    return message


def fill_repeated(message: Any, field_descriptor: Any, rng: random.Random, targets: Targets,
                  depth: int, small: bool) -> None:
    values = getattr(message, field_descriptor.name)
    count = rng.choice((0, 1, 2, 3, 5, 1 if small else rng.choice(REPEAT_COUNTS)))
    entry = field_descriptor.message_type
    if entry is not None and entry.GetOptions().map_entry:  # a map: keys and values
        key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
        for _ in range(min(count, 3 if small else count)):
            key = scalar(key_field, rng, targets, True)
            if value_field.type == FD.TYPE_MESSAGE:
                if depth < MAX_DEPTH:
                    fill(values[key], rng, targets, depth + 1, True)
            else:
                values[key] = scalar(value_field, rng, targets, small)
        return
    if field_descriptor.type != FD.TYPE_MESSAGE:
        values.extend(scalar(field_descriptor, rng, targets, small or count > 8)
                      for _ in range(count))
    elif depth < MAX_DEPTH and count:
        # A long list repeats one small element: it costs no generation and stays far below
        # MAX_MESSAGE_BYTES (10,001 copies of a 256 KiB string would be 2.5 GB).
        template = fill(values.add(), rng, targets, depth + 1, small or count > 8)
        for _ in range(count - 1):
            values.add().CopyFrom(template)


def scalar(field_descriptor: Any, rng: random.Random, targets: Targets,
           small: bool = False) -> Any:
    kind = field_descriptor.type
    if kind == FD.TYPE_STRING:
        known = targets.strings.get(field_descriptor.name)
        if known and rng.random() < 0.4:
            return rng.choice(known)
        if field_descriptor.name == "spec" and rng.random() < 0.6:
            return job_spec(rng)
        return text(rng, small)
    if kind == FD.TYPE_BYTES:
        return rng.randbytes(rng.choice((0, 1, 32, 4096)))
    if kind == FD.TYPE_BOOL:
        return rng.random() < 0.5
    if kind in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return rng.choice((0.0, -0.0, 1e-300, 3.4e38, float("nan"), float("inf")))
    low, high = INT_BOUNDS[kind]
    return integer(rng, low, high, targets.integers)


def random_bytes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice((1, 2, 3, 8, 64, 1024)))


# --- the cluster and its calls --------------------------------------------------------------------


@dataclass
class Fuzz:
    cluster: LocalCluster
    user: grpc.Channel
    """A user's channel with the admin token."""
    tenant: grpc.Channel
    """The same certificate with a token of role user for tenant TENANT."""
    agent: grpc.Channel
    """The agent certificate of CLUSTER_ID (no token: the AgentGateway takes none)."""
    kept_tokens: frozenset[str]
    """The ids of the admin token and TENANT's: never revoked."""
    seeded_jobs: list[str]
    targets: Targets

    def observe(self) -> tuple[Any, ...]:
        """What a refused call must not change (see the module doc). Each read commits a
        barrier first (~50 ms): they run at once."""
        scheduler, admin = pb_grpc.SchedulerStub(self.user), pb_grpc.AdminStub(self.user)
        pages = scheduler.ListJobs.future(pb.ListJobsRequest(limit=limits.MAX_PAGE_SIZE),
                                          timeout=CALL_TIMEOUT_S)
        tasks = [scheduler.ListTasks.future(pb.ListTasksRequest(job_id=job_id),
                                            timeout=CALL_TIMEOUT_S)
                 for job_id in self.seeded_jobs]
        tokens = admin.ListTokens.future(pb.ListTokensRequest(), timeout=CALL_TIMEOUT_S)
        status = admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=CALL_TIMEOUT_S)
        page = pages.result()
        jobs = list(page.jobs)
        while page.next_page_token:
            page = scheduler.ListJobs(pb.ListJobsRequest(limit=limits.MAX_PAGE_SIZE,
                                                         page_token=page.next_page_token),
                                      timeout=CALL_TIMEOUT_S)
            jobs += page.jobs
        clusters = []
        for cluster in status.clusters:
            cluster.ClearField("status")
            cluster.ClearField("heartbeat_age_ms")
            clusters.append(cluster)
        listed = [future.result() for future in tasks]
        for answer in listed:
            answer.ClearField("applied_index")  # moves with every entry (each read's barrier)
        return (jobs, listed, clusters, list(status.replicas),
                sorted(tokens.result().tokens, key=lambda t: t.token_id))

    def channel(self, caller: str) -> grpc.Channel:
        return {"admin": self.user, "tenant": self.tenant, "agent": self.agent}[caller]

    def digest(self) -> str:
        """The state's digest: a local read (no barrier, ~1 ms). Unchanged, nothing changed;
        changed, maybe only the clock (see the module doc)."""
        status = pb_grpc.AdminStub(self.user).ClusterStatus(
            pb.ClusterStatusRequest(include_digest=True), timeout=CALL_TIMEOUT_S)
        return str(status.state_digest)

    def members(self) -> set[str]:
        status = pb_grpc.AdminStub(self.user).ClusterStatus(pb.ClusterStatusRequest(),
                                                            timeout=CALL_TIMEOUT_S)
        return {member.raft_address for member in status.replicas}

    def incarnation(self) -> int | None:
        status = pb_grpc.AdminStub(self.user).ClusterStatus(pb.ClusterStatusRequest(),
                                                            timeout=CALL_TIMEOUT_S)
        return next((c.incarnation for c in status.clusters if c.cluster_id == CLUSTER_ID), None)

    def learn(self, method: Any, request: Any, answer: bytes | None) -> None:
        """Remember the ids an accepted call made, as targets for later requests."""
        if answer is None:
            return
        reply = message_factory.GetMessageClass(method.output_type).FromString(answer)
        if method.name == "SubmitJob":
            self.targets.add("job_id", reply.job_id)
        elif method.name == "CreateToken":
            self.targets.add("token_id", reply.token_id)
        elif method.name == "Register" and request is not None:
            self.targets.integers.append(request.incarnation)


def token_id_of(token: str) -> str:
    parsed = parse_token(token)
    assert parsed is not None, token
    return parsed[0]


def register(agent: grpc.Channel, incarnation: int) -> None:
    pb_grpc.AgentGatewayStub(agent).Register(pb.RegisterRequest(
        cluster_id=CLUSTER_ID, incarnation=incarnation, capabilities=["linux"],
        capacity=pb.Resources(cpu_milli=4000, memory_mb=8192, gpu=1)), timeout=CALL_TIMEOUT_S)


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzz]:
    """One replica holding one registered cluster and three jobs of three tasks that wait
    forever (they require UNPLACEABLE)."""
    with running(tmp_path_factory.mktemp("fuzz"), replica_count=1) as local:
        assert local.admin_token is not None and local.user_tls is not None
        address = local.grpc[0]
        with tls.open_channel(address, local.user_tls, CHANNEL_OPTIONS) as user_raw, \
                tls.open_channel(address, local.agent_tls(CLUSTER_ID), CHANNEL_OPTIONS) as agent:
            user = with_token(user_raw, local.admin_token)
            register(agent, 1)
            client = local.client()
            tenant_token = str(client.create_token(TENANT, "user", "fuzz").token)
            kept = frozenset(map(token_id_of, (local.admin_token, tenant_token)))
            spec = json.dumps({"name": "seeded", "allow_unschedulable": True, "tasks": [
                {"id": task_id, "command": ["mock"], "requires": [UNPLACEABLE]}
                for task_id in SEEDED_TASKS]})
            jobs = [client.submit(spec).job_id for _ in range(3)]
            targets = Targets(strings={
                "job_id": list(jobs), "task_id": [*SEEDED_TASKS, "t0", "t1"],
                "cluster_id": [CLUSTER_ID],
                "tenant": ["default", TENANT, "*"], "role": ["user", "operator", "admin"],
                "state": ["PENDING", "RUNNING", "CANCELLED"], "page_token": ["1", "2"],
                "raft_address": [*local.raft, *NOT_MEMBERS], "grpc_address": list(local.grpc),
            }, integers=[1])
            yield Fuzz(local, user, with_token(user_raw, tenant_token), agent, kept, jobs, targets)


@dataclass(frozen=True)
class Answer:
    code: grpc.StatusCode
    details: str = ""
    trailing: dict[str, Any] = field(default_factory=dict)
    body: bytes | None = None
    """The response's bytes; for a stream, its first message."""


def call(channel: grpc.Channel, service: Any, method: Any, payload: bytes) -> Answer:
    """`method` with `payload` as the request's bytes (a stream is cancelled after its first
    message)."""
    path = f"/{service.full_name}/{method.name}"
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=None,
                                          response_deserializer=None)(payload,
                                                                      timeout=CALL_TIMEOUT_S)
            first = next(iter(stream), None)
            stream.cancel()
            return Answer(OK, body=first)
        body = channel.unary_unary(path, request_serializer=None, response_deserializer=None)(
            payload, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        return Answer(error.code(), error.details() or "", dict(error.trailing_metadata() or ()))
    return Answer(OK, body=body)


def metadata_bytes(answer: Answer) -> int:
    """The size of a refusal's metadata as a gRPC client counts it (HPACK: name, value and 32
    per entry; a status message percent-encoded, binary values in base64)."""
    entries = [(":status", "200"), ("content-type", "application/grpc"),
               ("grpc-status", str(answer.code.value[0])),
               ("grpc-message", "x" * rpc.sent_bytes(answer.details)), *answer.trailing.items()]
    size = 0
    for key, value in entries:
        value_bytes = -(-len(value) * 4 // 3) if key.endswith("-bin") else len(value.encode())
        size += len(key) + value_bytes + 32
    return size


def readable(answer: Answer, payload: bytes) -> bool:
    """Whether a default client could read the answer: its metadata fits CLIENT_METADATA_BYTES
    (a NOT_FOUND echoing a 256 KiB id, and 20 spec issues quoting emoji, did not), and a
    RESOURCE_EXHAUSTED is a refusal — one of our bounds (the replica marks its answers) or
    gRPC's on the request's size — not this client failing to read the answer."""
    if metadata_bytes(answer) > CLIENT_METADATA_BYTES:
        return False
    return answer.code != grpc.StatusCode.RESOURCE_EXHAUSTED \
        or rpc.REPLICA_METADATA_KEY in answer.trailing or len(payload) > limits.MAX_MESSAGE_BYTES


def not_a_member(address: str, members: set[str], *, well_formed: bool) -> str:
    """`address`, or a variant that is no member's (and, unless `well_formed` may stay, one
    `membership.check_address` refuses): an invalid port never names a member."""
    try:
        membership.check_address(address)
    except RaftschedError:
        return address
    if well_formed and address not in members:
        return address
    return address + " "


@dataclass(frozen=True)
class Request:
    caller: str
    """Who sends it: "admin" or "tenant" (a user's certificate with that token) or "agent"."""
    payload: bytes
    message: Any
    """The request as generated (None for random bytes that are no message)."""
    expect: grpc.StatusCode | None = None
    """The one code allowed, when the request is refused whatever its content."""


def make_request(fuzz: Fuzz, rng: random.Random, service: Any, method: Any) -> Request:
    """A generated (or, one in RAW_EVERY, random bytes) request, made safe (the module doc).
    The AgentGateway's go over the agent's certificate, mostly for its own cluster; one in four
    of the others over the tenant token."""
    request_class = message_factory.GetMessageClass(method.input_type)
    caller = "agent" if service is GATEWAY else "admin"
    raw: Any = None
    if rng.randrange(RAW_EVERY):
        message = fill(request_class(), rng, fuzz.targets)
    else:
        payload = random_bytes(rng)
        try:
            raw = request_class.FromString(payload)
        except DecodeError:  # not a message at all: sent as is (the replica says INVALID_ARGUMENT)
            return Request(caller, payload, None)
        message = request_class()
        message.CopyFrom(raw)
    expect = None
    if service is GATEWAY:
        if rng.random() < 0.85:
            message.cluster_id = CLUSTER_ID
        if message.cluster_id != CLUSTER_ID:
            expect = grpc.StatusCode.PERMISSION_DENIED
    elif rng.random() < 0.25:
        caller = "tenant"
        if rule_of(service, method) not in (Rule.USER, Rule.CERTIFICATE):
            expect = grpc.StatusCode.PERMISSION_DENIED
    made_safe(fuzz, method, message)
    if raw is not None and message == raw:
        return Request(caller, payload, message, expect)  # random bytes that decode: as they are
    return Request(caller, message.SerializeToString(), message, expect)


def made_safe(fuzz: Fuzz, method: Any, message: Any) -> None:
    """Change what must not be sent (the module doc), and bound a long poll."""
    if method.name == "Heartbeat" and message.incarnation == fuzz.incarnation():
        message.wait_ms = min(message.wait_ms, MAX_FUZZ_LONG_POLL_MS)
    elif method.name in ("AddReplica", "RemoveReplica"):
        message.raft_address = not_a_member(message.raft_address, fuzz.members(),
                                            well_formed=method.name == "RemoveReplica")
    elif method.name == "RevokeToken" and message.token_id in fuzz.kept_tokens:
        message.token_id = ""


def describe(request: Request) -> str:
    if request.message is None:
        return f"random bytes {request.payload[:64]!r} ({len(request.payload)} bytes)"
    shown = text_format.MessageToString(request.message, as_one_line=True)
    shown = shown if len(shown) <= 300 else f"{shown[:300]}... ({len(request.payload)} bytes)"
    return f"{shown} (as {request.caller})"


def assert_quiet_log(cluster: LocalCluster, where: str) -> None:
    """No traceback in the replica's log (gRPC's "Exception deserializing request!" is one, our
    events carry theirs in a field) and no event of level error or above."""
    path = cluster.root / "logs" / "r0.log"
    log = path.read_text(errors="replace")
    assert "Traceback" not in log and "Exception " not in log, f"{where}\n{log[-3000:]}"
    errors = [event for event in read_events(path) if event.level in ("error", "critical")]
    assert not errors, f"{where}: {errors[:3]}"


def run_rounds(fuzz: Fuzz, service: Any, method: Any,
               make: Callable[[random.Random], Request]) -> dict[grpc.StatusCode, int]:
    """ROUNDS calls of `method`; the codes answered, counted."""
    name = f"{service.name}.{method.name}"
    rng = random.Random(f"{SEED}/{name}")
    before, digest = fuzz.observe(), fuzz.digest()
    codes: dict[grpc.StatusCode, int] = {}
    for round_number in range(ROUNDS):
        request = make(rng)
        answer = call(fuzz.channel(request.caller), service, method, request.payload)
        code = answer.code
        codes[code] = codes.get(code, 0) + 1
        where = (f"RAFTSCHED_FUZZ_SEED={SEED} {name} round {round_number}: {code.name} "
                 f"{answer.details[:300]!r}; request: {describe(request)}")
        assert code in ALLOWED, where
        assert readable(answer, request.payload), f"{where}: {metadata_bytes(answer)} bytes"
        assert request.expect in (None, code), where
        assert fuzz.cluster.replicas[0].alive(), where
        if code == OK:
            fuzz.learn(method, request.message, answer.body)
            before, digest = fuzz.observe(), fuzz.digest()
            continue
        now = fuzz.digest()
        if now != digest:  # the clock, or more: look
            assert fuzz.observe() == before, where
            digest = now
    assert_quiet_log(fuzz.cluster, f"RAFTSCHED_FUZZ_SEED={SEED} {name}")
    return codes


def test_the_fuzzed_services_are_every_service_the_api_defines() -> None:
    assert {service.name for service in SERVICES} == set(pb.DESCRIPTOR.services_by_name)


@pytest.mark.parametrize(("service", "method"), METHODS)
def test_every_rpc_answers_generated_requests_with_an_expected_code_and_refusals_change_nothing(
    fuzz: Fuzz, service: Any, method: Any
) -> None:
    codes = run_rounds(fuzz, service, method,
                       lambda rng: make_request(fuzz, rng, service, method))
    print(f"{service.name}.{method.name}: {sorted((c.name, n) for c, n in codes.items())}")


@pytest.mark.parametrize("method", [pytest.param(m, id=m.name) for m in GATEWAY.methods])
def test_agent_gateway_any_cluster_id_from_a_user_is_permission_denied(fuzz: Fuzz,
                                                                        method: Any) -> None:
    def as_user(rng: random.Random) -> Request:
        message = fill(message_factory.GetMessageClass(method.input_type)(), rng, fuzz.targets)
        if rng.random() < 0.5:
            message.cluster_id = CLUSTER_ID
        return Request("admin", message.SerializeToString(), message,
                       grpc.StatusCode.PERMISSION_DENIED)

    run_rounds(fuzz, GATEWAY, method, as_user)


def test_a_spec_one_byte_past_max_spec_bytes_is_refused_and_changes_nothing(fuzz: Fuzz) -> None:
    """The one bound of limits.py a generated string cannot reach cheaply in every round."""
    spec = json.dumps({"name": "big", "allow_unschedulable": True,
                       "tasks": [{"id": "t", "command": ["mock"], "requires": [UNPLACEABLE]}]})
    spec += " " * (limits.MAX_SPEC_BYTES + 1 - len(spec))
    scheduler = pb.DESCRIPTOR.services_by_name["Scheduler"]
    before = fuzz.observe()
    answer = call(fuzz.user, scheduler, scheduler.methods_by_name["SubmitJob"],
                  pb.SubmitJobRequest(spec=spec).SerializeToString())
    assert answer.code == grpc.StatusCode.INVALID_ARGUMENT, answer
    assert f"at most {limits.MAX_SPEC_BYTES} bytes" in answer.details, answer.details
    assert fuzz.observe() == before
    assert_quiet_log(fuzz.cluster, "SubmitJob past MAX_SPEC_BYTES")


@pytest.mark.parametrize("service", [pytest.param(s, id=s.name) for s in SERVICES])
def test_a_request_past_max_message_bytes_is_resource_exhausted(fuzz: Fuzz, service: Any) -> None:
    """gRPC's own bound (MAX_MESSAGE_BYTES, set on the server) refuses it before any servicer:
    one RPC per service is enough (the bound does not depend on the method)."""
    method = service.methods[0]
    channel = fuzz.agent if service is GATEWAY else fuzz.user
    before = fuzz.observe()
    answer = call(channel, service, method, b"\x0a" + b"\xff" * (limits.MAX_MESSAGE_BYTES + 1))
    assert answer.code == grpc.StatusCode.RESOURCE_EXHAUSTED, answer
    assert fuzz.observe() == before
    assert fuzz.cluster.replicas[0].alive()
    assert_quiet_log(fuzz.cluster, f"{service.name}.{method.name} past MAX_MESSAGE_BYTES")
