"""The bounds on data, named in one place: what a replica, an agent or a client accepts, holds,
sends or keeps (sizes, counts, queue lengths, pages, batches).

A value that crosses one of these bounds is refused with RESOURCE_EXHAUSTED (or, for a job spec,
with a validation error naming the field), or waits for a later round where that is the
documented behaviour (a batch's remainder goes in the next one); nothing grows silently. Units are
the last part of each name. The knobs of one loop — its timeouts, periods, backoffs and retry
counts — are named beside the loop they govern; the dev tooling and the jepsen-style harness
keep their own bounds too.
"""

from __future__ import annotations

# --- job spec -----------------------------------------------------------------------------------
MAX_SPEC_BYTES = 32 * 1024 * 1024
"""Largest job spec file or submitted document, in bytes; also the largest wire form
(SubmitJobRequest.spec_wire) a replica decodes."""
MAX_YAML_SPEC_BYTES = 128 * 1024
"""Largest YAML document a replica parses (SubmitJob's `spec`); a larger one is refused, saying
to send JSON or the wire form (the CLI and the Python client parse files themselves and send
the wire form). Parsing holds the interpreter lock that the replica's Raft thread needs (libyaml
and the cyclic GC it sets off), and a hold longer than the 0.4 s election timeout costs the
leadership: 22 MB of YAML held it ~10 s. The longest hold while parsing the worst shapes found
(flow sequences and mappings of one-character items), `scripts/bench spec` at load 1 on 2
cores: 24-31 ms at 128 KiB, 49-71 ms at 256 KiB (150 ms at 512 KiB)."""
MAX_JSON_SPEC_BYTES = 512 * 1024
"""Largest JSON document a replica parses (SubmitJob's `spec`); a larger one is refused, saying
to send the wire form. Measured as MAX_YAML_SPEC_BYTES is, worst shape `[[],[],...]`: 16-28 ms
at 512 KiB, 42-66 ms at 1 MiB, 2.9 s at 32 MiB."""
MAX_TASKS_PER_JOB = 100_000
MAX_DEPENDENCIES_PER_TASK = 10_000
MAX_COMMAND_ARGS = 1_024
MAX_COMMAND_BYTES = 64 * 1024
"""Sum of the UTF-8 lengths of one task's argv."""
MAX_ENV_VARS = 256
MAX_ENV_BYTES = 64 * 1024
"""Sum of the UTF-8 lengths of one task's env names and values."""
MAX_ID_CHARS = 128
"""Task ids, job ids, cluster ids, tenant names, capability names."""
MAX_NAME_CHARS = 256
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_REQUIRES_PER_TASK = 64
MAX_CWD_CHARS = 4_096
MAX_ATTEMPTS_PER_TASK = 100
"""Upper bound of `retry.max_attempts` a spec may ask for."""
MAX_BACKOFF_S = 24 * 3600
MAX_BACKOFF_MULTIPLIER = 10.0
MAX_TIMEOUT_S = 30 * 24 * 3600
MAX_NON_RETRYABLE_EXIT_CODES = 256
MIN_CPU_MILLI = 1
"""Every task asks for some cpu (at least 0.001): a cluster with less free can take no task."""
MAX_CPU_MILLI = 1_000_000 * 1000
MAX_MEMORY_MB = 1024 * 1024 * 1024
MAX_GPU = 1_000_000
PRIORITY_MIN = 0
PRIORITY_MAX = 100
MAX_JOB_RETRY_BUDGET = 10_000_000
"""Upper bound of a job's `retry_budget`."""
MAX_GRACE_S = 3600
"""Upper bound of a task's `grace_s` (SIGTERM to SIGKILL when it is stopped)."""
MAX_REPORTED_CYCLES = 10
"""Dependency cycles named in one validation report; the rest are only counted."""
MAX_SPEC_EXPANDED_CHARS = MAX_SPEC_BYTES
"""A YAML spec's document with every alias (and merge key) expanded, measured as the characters
of its scalars plus one per node, is at most this large: no bigger than the largest spec written
out. Measured on the parsed nodes, before any value is built ("billion laughs")."""
MAX_SPEC_ALIAS_CHARS = 1024 * 1024
MAX_SPEC_ALIAS_RATIO = 10
"""What aliases may repeat, in that measure: MAX_SPEC_ALIAS_CHARS, or MAX_SPEC_ALIAS_RATIO times
what the spec writes out once, whichever is more. It keeps a spec's text a fair measure of its
cost (69 KB of aliases once became a 12 MB log entry)."""

# --- defaults of a task spec --------------------------------------------------------------------
DEFAULT_CPU = 1.0
DEFAULT_MEMORY_MB = 128
DEFAULT_GPU = 0
DEFAULT_PRIORITY = 50
DEFAULT_TENANT = "default"
DEFAULT_MAX_ATTEMPTS = 1
DEFAULT_BACKOFF_S = 1.0
DEFAULT_BACKOFF_MULTIPLIER = 2.0
DEFAULT_BACKOFF_MAX_S = 60.0
DEFAULT_JITTER = 0.1

# --- replicated log -----------------------------------------------------------------------------
MAX_ENTRY_BYTES = 48 * 1024 * 1024
"""Largest encoded command; a 100,000-task job spec fits."""
MAX_BATCH_ITEMS = 10_000
"""Items in one ASSIGN_BATCH or REPORT_BATCH."""
MAX_PREEMPTIONS_PER_BATCH = 1_000
"""Preemptions one ASSIGN_BATCH may carry (the planner proposes far fewer: the state machine's
rate bound, `policy.MAX_PREEMPTIONS_PER_WINDOW`, refuses the rest)."""
MAX_REASON_CHARS = 512
MAX_ADDRESS_CHARS = 256
"""A replica's host:port."""
MAX_REPLICAS = 16
"""Replica addresses the state remembers (Raft clusters are 3 or 5; room for changes)."""

MAX_WITHDRAWALS_PER_BATCH = 64
"""Queued attempts one ASSIGN_BATCH may take back from agents' local queues (late binding) for
tasks of a higher priority; the planner asks for fewer (`placement.MAX_WITHDRAWALS_PER_PLAN`)."""

# --- state machine ------------------------------------------------------------------------------
MAX_LIVE_JOBS = 100_000
"""Jobs not yet terminal; a submit beyond it is RESOURCE_EXHAUSTED."""
MAX_RETAINED_JOBS = 200_000
"""Jobs kept in state (live + finished); the oldest finished jobs are dropped past it."""
JOB_RETENTION_MS = 7 * 24 * 3600 * 1000
"""Finished jobs are dropped by TICK this long after they finish."""
MAX_TASKS_IN_STATE = 2_000_000
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024 * 1024
"""Largest snapshot file a replica reads (2,000,000 tasks with history take a few hundred MB)."""
MAX_CLUSTERS = 1_024
MAX_CAPABILITIES_PER_CLUSTER = 256
MAX_TENANTS = 10_000
MAX_QUEUED_TASKS = 1_000_000
"""Tasks accepted and not yet running or finished (PENDING, RUNNABLE, RETRY_WAIT), over every
tenant: the global bound that protects the replicas' memory. A submit past it is
RESOURCE_EXHAUSTED with a retry-after hint, whatever the tenant's own limits."""
MAX_TENANT_WEIGHT = 10_000
"""Largest fair-share weight of a tenant (`admin tenant set --weight`); the default is 1."""
MAX_IDEMPOTENCY_KEYS = 1_000_000
IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000
MAX_NOTES_PER_TASK = 32
"""Late/duplicate report notes kept per task; past it they are only counted."""
MAX_KILL_DIRECTIVES_PER_CLUSTER = 20_000
"""Kill directives one cluster holds unconfirmed (fences its agent must stop and has not yet
reported stopped). An honest agent confirms each within a heartbeat or two and runs at most
MAX_RUNNING_ATTEMPTS at once, so it never comes near; an agent that stops confirming reaches it,
and then each kill it is owed is counted (`Cluster.kills_unrecorded`), never silently dropped:
its cluster takes no new work (`feasibility.Unfit.KILLS_UNRECORDED`) until its agent confirms
kills and registers again, which re-derives a kill for every stale attempt it still holds.
Only kills for attempts the state placed on that cluster are ever recorded there."""
MAX_KILL_DIRECTIVES = MAX_CLUSTERS * MAX_KILL_DIRECTIVES_PER_CLUSTER
"""Kill directives the whole state may hold: derived, no bound of its own."""
MAX_REGISTER_KNOWN_ATTEMPTS = 100_000
"""Attempts one Register may list (`known`): what a real agent may hold, MAX_ATTEMPT_RECORDS
(running, or finished with their report unacked). More is RESOURCE_EXHAUSTED before anything is
proposed; the CLUSTER_REGISTER entry carries only those the state knows for that cluster."""
MAX_TIMER_EXPIRIES_PER_TICK = 100_000
"""One TICK handles at most this many expired timers; the rest wait for the next TICK."""
MAX_INFRA_RETRIES = 10
"""Infrastructure failures (rejected, lost, preempted) a task may absorb before it fails."""
INFRA_BACKOFF_MS = 500
INFRA_BACKOFF_MAX_MS = 10_000
ASSIGN_TIMEOUT_MS = 60_000
"""An attempt still ASSIGNED (never confirmed started) this long is lost (on_lost: replace)."""
RUN_TIMEOUT_GRACE_MS = 30_000
"""The FSM times out a RUNNING attempt this long after its task's timeout_s, if the agent has
not reported it itself."""
MAX_TOKENS = 1_000
"""API tokens the state holds; a new one beyond it is RESOURCE_EXHAUSTED (revoke one first)."""
MAX_REVOKED_CERTS = 10_000
"""Revoked client certificates the state remembers (`admin cert revoke`); one more is
RESOURCE_EXHAUSTED. Each is a fingerprint, a subject and a reason: ~0.5 KB."""
MAX_CERT_SUBJECT_CHARS = 256
"""The subject (common name) kept with a revoked certificate, for `admin cert list`."""
MAX_TOKEN_NOTE_CHARS = 200
"""The free-text note an operator attaches to a token (who holds it, what for)."""
JOB_INDEX_COMPACT_MIN_HOLES = 64
"""The job index (state/job_index.py) leaves a hole where a job left an order; an order compacts
when its holes outnumber its jobs and are at least this many (amortised O(1) per removal; a
ListJobs scan skips at most max(jobs, this many) holes)."""
JOB_INDEX_SCAN_SLICE = 256
"""Entries of a job index order a scan copies at a time: iterating a slice runs in C (a third of
the cost of an index loop in Python), and a page stops within one slice of where it ends."""

# --- placement ----------------------------------------------------------------------------------
MAX_PLACEMENT_SCAN = 50_000
"""Ready tasks one planning round looks at, placed or not."""

# --- replica: the gRPC server, the agent gateway and the Raft adapter ----------------------------

MAX_RPC_WORKERS = 64
"""Concurrent RPCs per replica (long polls and watches hold one each)."""

MAX_STREAMS = MAX_RPC_WORKERS // 4
"""Long-lived server streams (WatchJob, WatchEvents, TaskLogs, SaveSnapshot, reflection, health
watches) one replica holds open at once, each on an RPC worker for its whole life: the other
three quarters of the workers are always left to heartbeats, reports and submits. Past it a new
stream is RESOURCE_EXHAUSTED (retry later)."""

MAX_STREAMS_PER_CALLER = MAX_STREAMS // 2
"""Of MAX_STREAMS, what one caller may hold, so one caller cannot take them all: a caller is a
token (users), a compute cluster (agents), a certificate (token-less health and reflection
streams), or the client host under --insecure-dev. Past it a new stream of that caller is
RESOURCE_EXHAUSTED. (Per caller, not per host: one token's watches from a shared host no longer
block every other tenant's.)"""

ADMIN_STREAM_RESERVE = 2
"""Of MAX_STREAMS, how many only admin-role tokens may take: an admin's SaveSnapshot or watch is
served while other callers hold every ordinary slot."""

MAX_STREAM_AGE_S = 15 * 60.0
"""A WatchJob, WatchEvents, TaskLogs, health-watch or reflection stream is ended by the server
after this long (`raftsched replica --max-stream-age-s`), so that its slot is contended for
again. WatchJob, WatchEvents and TaskLogs end cleanly with the trailer STREAM_END_KEY=max-age
and the client re-opens them where they were (the CLI never notices); a reflection stream is
cancelled."""

EVENT_RETENTION = 100_000
"""Events of the event stream (WatchEvents) one replica keeps in memory, the newest, to serve
resumes from (`raftsched replica --event-retention`): about 200 bytes each. A resume from an
index older than what is kept, or from before this replica started or installed a snapshot, is
FAILED_PRECONDITION "too old": list again, then watch from the list's applied_index. The newest
entry's events are kept whole even past it (a job of MAX_TASKS_PER_JOB tasks submitted or
cancelled), so a caught-up stream is never made too old by one large entry."""

EVENT_BATCH = 256
"""Events one WatchEvents stream takes from the kept ones at a time: what a stream holds beyond
its place in the log (a slow consumer costs no more; one that falls behind what is kept gets
"too old")."""

EVENT_PROGRESS_S = 5.0
"""A WatchEvents stream whose filter matched nothing for this long while entries were applied
sends a "progress" event carrying the last applied index, so its client's resume point moves."""

EVENT_SETTLE_S = 0.05
"""A WatchEvents stream that has caught up, once woken by a new entry, waits this much longer
before it reads what is kept: the entries applied meanwhile are read and sent as one batch
rather than each waking every stream (under the GIL each wake-up costs the applier and the
submits a thread switch). Events reach a caught-up stream up to this much later."""

REFUSED_CALL_LOG_LINES = 20
"""`call_refused` warning lines a replica writes per REFUSED_CALL_LOG_WINDOW_S beyond the first
refusal of each kind (RPC and status code), which is always written: a flood of bad tokens or
revoked certificates cannot fill the log. A `call_refused_suppressed` line at the end of each
window counts what was left out."""

REFUSED_CALL_LOG_WINDOW_S = 10.0
"""The window of REFUSED_CALL_LOG_LINES."""

HANDSHAKE_TIMEOUT_S = 10.0
"""A connection to a replica's Raft or gRPC port that has not authenticated this long after it
was accepted is closed. Raft: the peer has not proved the cluster secret and said which member
it is (one round trip: milliseconds between healthy replicas, whose election timeout is 1 s).
gRPC: the TLS handshake (and HTTP/2's opening) is not done (grpc's
`grpc.server_handshake_timeout_ms`, whose own default is 120 s). An authenticated connection is
never closed for being idle. `raftsched replica --handshake-timeout-s` changes it."""

MAX_UNAUTHENTICATED_RAFT_CONNECTIONS_PER_ADDRESS = MAX_REPLICAS
"""Incoming Raft connections from one remote address (the peer's IP) not yet authenticated, at
once (see HANDSHAKE_TIMEOUT_S); one more is closed as soon as it is accepted. Room for every
other member on one host reconnecting at the same moment."""

MAX_UNAUTHENTICATED_RAFT_CONNECTIONS = 8 * MAX_UNAUTHENTICATED_RAFT_CONNECTIONS_PER_ADDRESS
"""The same, from every address together: what they can hold of the replica's file
descriptors (shared with its journal, snapshots and peers) stays small."""

MAX_GRPC_CONNECTIONS = 4_096
"""Incoming gRPC connections one replica holds at once, authenticated or not (grpc's
`grpc.max_allowed_incoming_connections`): one more is closed as soon as it is accepted. Agents
hold one each, a user's command one while it runs. A replica takes at most half its open-file
limit (RLIMIT_NOFILE) if that is lower, so that connections never starve its journal, snapshots
and Raft peers of file descriptors. grpc offers no cap per remote address: that one is the host
firewall's (deploy/README.md). `raftsched replica --max-grpc-connections` changes it."""

MAX_MESSAGE_BYTES = MAX_SPEC_BYTES + 1024 * 1024
"""A gRPC message either way: the largest spec plus room for the envelope."""

MAX_LONG_POLL_MS = 5_000
"""A heartbeat long-poll is held at most this long."""

LARGE_SPEC_BYTES = 256 * 1024
MAX_CONCURRENT_LARGE_SPECS = 1
"""Specs of LARGE_SPEC_BYTES or more (document or wire form) one replica submits at once, from
decode to commit (the rest wait their turn)."""

MAX_REPORTED_SPEC_ISSUES = 20
"""Spec problems named in one INVALID_ARGUMENT answer (the count of the rest follows)."""

MAX_CUSTOM_RESOURCES_PER_TASK = 8
"""Named custom resources one task may ask for (`resources.custom`)."""
MAX_CUSTOM_RESOURCES_PER_CLUSTER = 32
"""Named custom resources one agent may advertise (`--resource NAME=COUNT`)."""
MAX_CUSTOM_RESOURCE_COUNT = 1_000_000_000
"""The most of one custom resource a task may ask for or a cluster advertise."""
MAX_LOG_TAIL_BYTES = 64 * 1024 * 1024
"""`task logs --tail` reaches back this far at most (the agent caps each output file anyway)."""
SNAPSHOT_CHUNK_BYTES = 1024 * 1024
"""Bytes of a saved snapshot per message of Admin.SaveSnapshot (well under MAX_MESSAGE_BYTES)."""
SNAPSHOT_SAVE_TIMEOUT_S = 600.0
"""How long Admin.SaveSnapshot waits for the leader to write a fresh snapshot (a forked child
writes one: about 20 s per million tasks on two cores)."""
MAX_STATUS_MESSAGE_BYTES = 2 * 1024
"""A refusal's message as gRPC sends it (UTF-8, each byte outside printable ASCII and '%'
percent-encoded into three); a longer one is cut, saying so. With MAX_STATUS_VIOLATIONS_BYTES it
keeps a refusal's trailers (the message, and again inside the details) within the 8 KiB of
metadata a gRPC client reads by default: past it the client drops the answer and reports
RESOURCE_EXHAUSTED instead (20 spec issues quoting emoji once made 24 KiB)."""

MAX_STATUS_VIOLATIONS_BYTES = 1536
"""The field violations (google.rpc.BadRequest) of one refusal, serialized; those past it are
left out (the message names them, as far as it has room)."""

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1_000
"""Jobs in one ListJobs page."""

MAX_PAGE_TOKEN_CHARS = 20
"""A ListJobs page token: the decimal seq of a job (any 64-bit seq fits), after an `n` for a
newest-first listing; a longer or non-decimal token is INVALID_ARGUMENT."""

MAX_LIST_QUERY_CHARS = 128
"""ListJobs' `query` (a text the job id or name contains); a longer one is INVALID_ARGUMENT."""

LIST_QUERY_MAX_SCAN_JOBS = 20_000
"""Jobs one ListJobs call with a `query` examines for its page, and again for its counts by
state (the page then ends early with a next_page_token; the counts say they are partial): a
read holds the apply lock, so its work is bounded (about 20 ms each on the bench machine)."""

TASK_SUMMARY_MAX_SPANS = 3
"""Attempts per task whose times ListTasks returns when asked (`with_spans`, the console's
timeline): the latest ones; a task retried more shows its last three. At MAX_TASKS_PER_JOB
tasks that is ~60 bytes x 300,000 = 18 MB, inside MAX_MESSAGE_BYTES."""

MAX_DELIVERIES_PER_HEARTBEAT = 1_000
"""Assignments or kills one heartbeat reply carries; the rest come with the next."""

MAX_APPLY_BACKLOG = 10_000
"""Committed entries waiting for the applier thread; past it Raft's tick waits for room."""

COMMANDS_QUEUE_MAX = 20_000
"""Submissions waiting for the tick thread; beyond it pysyncobj answers QUEUE_FULL."""

MAX_PIPELINED_PROPOSALS = 10_000
"""Entries one `propose_many` call may submit."""

PROPOSE_TIMEOUT_S = 5.0
"""How long a proposal (`replica.proposals.Proposer`: the leader's own commands and the clients'
and agents' alike) waits for its entry to commit before its outcome is unknown
(DEADLINE_EXCEEDED to a client: retry with the same request id)."""


# --- client -----------------------------------------------------------------------------------

MAX_SERVERS = 64
"""Addresses one client or agent is configured with."""

RETRY_JITTER = 0.5
"""The one retry policy's jitter (`client.retry.Backoff`): a wait is drawn uniformly from
[(1 - RETRY_JITTER) x ceiling, ceiling], so clients and agents that failed together do not
retry together."""

RETRY_MAX_DOUBLINGS = 30
"""A backoff's ceiling doubles at most this many times (then the cap rules anyway)."""


# --- web console (raftsched/web) ---------------------------------------------------------------

WEB_MAX_SESSIONS = 1_000
"""Signed-in browser sessions the console holds (each with its own client); signing in past it
ends the session idle the longest."""

WEB_SESSION_IDLE_S = 3_600.0
"""A session unused this long is ended (its token forgotten): the user signs in again."""

WEB_MAX_QUERY_BYTES = 4_096
"""A request's query string, and a form's body, above this answer 414/413 before any work."""

WEB_MAX_ID_CHARS = 256
"""A job or task id in a path longer than this answers 404 without asking the replicas."""

WEB_JOBS_PAGE = 50
"""Jobs on one page of /jobs (ListJobs' limit; its page token gives the next page)."""

WEB_GRAPH_MAX_NODES = 2_000
"""A DAG with more tasks than this is drawn collapsed: one group node per layer with its
counts per state, rather than a node per task."""

WEB_GRAPH_LAYER_MAX_ROWS = 25
"""A DAG layer (tasks at the same depth) with more tasks than this is wrapped into sub-columns
rather than drawn as one column (a 2,000-task fan-out would be 80,000 px tall)."""

WEB_GRAPH_WRAP_COLUMNS = 5
"""Sub-columns of a wrapped layer at most (then its rows grow): with the layers beside it, a
fan-out's graph stays about as wide as a browser window (~1,200 px)."""

WEB_TASK_TABLE_MAX_ROWS = 2_000
"""Rows of a job page's task table; the rest are counted, not listed."""

WEB_TIMELINE_MAX_BARS = 5_000
"""Attempt bars a job page's timeline draws: the latest-starting ones; the page says how many
attempts it leaves out."""

WEB_TIMELINE_REFRESH_S = 2.0
"""While a job runs, its open page fetches its timeline again at most this often (changes in
between coalesce into one fetch)."""

WEB_LOG_TAIL_MAX_BYTES = 1 << 20
"""A task page shows at most this much of an output's end (the download has it all)."""

WEB_LIVE_MAX_STREAMS = 200
"""Live (server-sent events) streams the console serves at once, of each kind (job pages, task
outputs); one more answers 503."""

WEB_LIVE_MIN_REFRESH_S = 0.25
"""A live page's task list is fetched at most this often (changes in between coalesce)."""

WEB_HUB_MAX_BACKOFF_S = 30.0
"""The console's shared event stream, broken, is opened again after a backoff doubling from 1 s
to this (every live page is marked at each break, so pages refresh at least this often while the
stream is down)."""

WEB_LIVE_OUTPUT_KEEP_CHARS = 256 * 1024
"""A task page following a running attempt's output keeps at most this many characters of it
in the page (the oldest are dropped as new ones arrive; the download has it all)."""

WEB_LIVE_OUTPUT_QUEUE = 64
"""Pieces of output (each at most one TaskLogs chunk) waiting between the thread that follows an
attempt and the browser's stream; the thread waits while it is full."""

WEB_LIVE_RECONNECTS = 10
"""A live page re-opens a broken stream at most this many times in a row (its backoff doubles
from 1 s to 30 s), then says so and stops: a reload starts again."""


# --- agent: its outbox, fences, executor and session ------------------------------------------

REPORT_BATCH_MAX = 2_000
"""Reports in one Report call."""

MAX_REPORT_BATCHES_PER_FLUSH = 20
"""Report calls in one flush before the reporter looks at completions again."""

MAX_ASSIGNMENTS_PER_BEAT = 1_000
"""Assignments handled from one heartbeat answer; the rest come again with the next one."""

MAX_AGENT_QUEUE_DEPTH = 1_024
"""Attempts an agent may hold in its local queue beyond its free capacity (late binding: the
leader commits up to the cluster's declared `queue_depth` of them; the agent starts the next
the moment a slot frees). A registration declaring more is refused, naming the field."""

OUTBOX_ADMISSION_PAUSE_REPORTS = 50_000
"""With this many reports unacked, assignments are left for later (they are redelivered)."""

MAX_RETAINED_ATTEMPT_DIRS = 1_000
"""Finished attempt dirs (with their stdout/stderr) kept for inspection; older ones go."""

MAX_TRACKED_FREED_SLOTS = 10_000
"""Freed slots remembered for the slot-turnaround figure; beyond it the oldest count as idle."""

MAX_REMEMBERED_ACKS = 10_000
"""Acked reports remembered (in memory) for the crossing window."""

MAX_TASK_OUTPUT_BYTES = 8 * 1024 * 1024
"""Each of stdout and stderr is kept up to this size per attempt; the rest is drained and
dropped."""

MAX_RUNNING_ATTEMPTS = 10_000
"""Attempts one executor watches at once; start() beyond it raises ExecutorError."""

MAX_FENCE_ENTRIES = 1_000_000
"""Task entries kept before the lowest fences are folded into the floor."""

MAX_LAZY_ACKS = 2_000
"""Acked reports whose deletion waits for the next synced outbox write (agent/outbox.py)."""

MAX_PENDING_REPORTS = 100_000
"""Reports held unacked; storing one more raises OutboxFull."""

MAX_ATTEMPT_RECORDS = 100_000
"""Attempt records held (running, or finished with their report unacked)."""


# --- One parse per submit, a batch submit (issue 24) ------------------------------------------

MAX_BATCH_JOBS = 10_000
"""Jobs one SubmitJobs call (and one JOB_SUBMIT_BATCH entry) may carry; more are refused
(INVALID_ARGUMENT, naming the count) before anything is parsed."""

MAX_BATCH_BYTES = MAX_SPEC_BYTES
"""Bytes of spec_wire one SubmitJobs call may carry in all (inside MAX_MESSAGE_BYTES); more are
refused before anything is parsed."""

MAX_BATCH_LABEL_CHARS = 256
"""Characters of a SubmitJobs job's label (its file name in a refusal's message)."""

MAX_JOBS_PER_BATCH_ENTRY = 1_000
"""Jobs one JOB_SUBMIT_BATCH entry carries at most (the leader splits a larger call): applying a
one-task job costs ~0.1 ms, and an entry is applied under the apply lock that every read and
every call's token check waits for, so an entry holds it ~0.1 s at most, not a second."""

BATCH_ENTRY_OVERHEAD_BYTES = 64
"""Room kept in each JOB_SUBMIT_BATCH entry for its tag, headers and now_ms: a batch is split so
that its jobs' packed bytes stay under MAX_ENTRY_BYTES minus this."""
# --- Jobs on a clock: replicated schedules (issue 25) ---------------------------------------------

MAX_SCHEDULES = 10_000
"""Schedules the state holds in all; SCHEDULE_CREATE past it is RESOURCE_EXHAUSTED."""

MAX_SCHEDULES_PER_TENANT = 1_000
"""Schedules one tenant holds; SCHEDULE_CREATE past it is RESOURCE_EXHAUSTED."""

MAX_SCHEDULE_RUNS_KEPT = 50
"""Recent runs (nominal time, job id) a schedule remembers, newest last; older ones drop off
(their jobs live on under retention)."""

MAX_SCHEDULE_ID_CHARS = MAX_ID_CHARS - 24
"""A schedule id leaves room in a job id for its run's suffix ("-20261025T010000Z", or with
milliseconds "-20261025T010000.250Z")."""

MAX_FIRES_PER_COMMAND = 64
"""Nominal times one SCHEDULE_FIRE carries (a catch-up after an outage fires them in pieces)."""

MAX_BACKFILL_RUNS = 1_000
"""Nominal times one backfill may name; a wider range is refused, naming the bound."""

MAX_BACKFILL_SPAN_MS = 366 * 24 * 3600 * 1000
"""A backfill's range (--from .. --to) is at most this long (a year and a day)."""

MAX_SCHEDULE_RULE_WIRE_BYTES = 4_096
"""The rule's wire form a schedule stores (opaque to apply) packs to at most this many bytes."""

MAX_SCHEDULE_NOTE_CHARS = 512
"""A schedule's note (why it was paused)."""

DEFAULT_SCHEDULE_CATCHUP_WINDOW_MS = 10 * 60 * 1000
"""A fire missed by at most this much (a failover, a short outage) still happens once a leader
exists; older misses are skipped and counted."""

SCHEDULE_FIRE_PERIOD_S = 0.25
"""How often the leader's firing component looks for due fire times."""

SCHEDULE_MIN_EVERY_MS = 1_000
"""An interval schedule fires at most once a second (`every: 1s`)."""

SCHEDULE_MAX_EVERY_MS = 366 * 24 * 3600 * 1000
"""An interval is at most a year and a day."""

SCHEDULE_MAX_CATCHUP_WINDOW_MS = 7 * 24 * 3600 * 1000
"""`catchup_window_s` is at most a week."""

SCHEDULE_MAX_PAUSE_AFTER_FAILURES = 1_000
"""`pause_after_failures` is at most this (0: never pause)."""

SCHEDULE_NEXT_SHOWN = 10
"""`schedule show` lists this many next fire times."""

MAX_CRON_CHARS = 256
"""A cron expression's text (`schedule.cron`)."""

MAX_ZONE_NAME_CHARS = 64
"""An IANA time zone name (`schedule.timezone`)."""

CRON_SEARCH_DAYS = 9 * 366
"""A cron rule's walk through the calendar gives up after this many days without a match: past
the longest gap between two 29 Februaries (8 years, 2096 -> 2104)."""

MAX_ZONES_CACHED = 512
"""Time zones whose offset range (how far a wall-clock time may lie from UTC) is kept in memory
once worked out (a few hundred ms each)."""


# --- Tasks hand results downstream (issue 26) ---

MAX_TASK_RESULT_OUTPUTS_BYTES = 64 * 1024
"""Size of the JSON object a task may leave at `$RAFTSCHED_OUTPUT` (its outputs, handed to
dependents); a larger file fails the attempt, saying so. Distinct from MAX_TASK_OUTPUT_BYTES
(stdout/stderr kept per attempt)."""

MAX_TASK_OUTPUTS_DEPTH = 32
"""How deep a task's outputs may nest arrays and objects (checked before they are parsed, on the
agent and at apply: the parser's own recursion limit depends on the stack it runs on)."""

MAX_JOB_OUTPUTS_BYTES = 8 * 1024 * 1024
"""The outputs one job keeps in all (the replicated state holds them until the job is
forgotten): a success whose outputs would pass it fails its attempt, saying so."""

MAX_OUTPUTS_BYTES_IN_STATE = 1024 * 1024 * 1024
"""The outputs all jobs keep together (each replica holds them in memory until their jobs are
forgotten; MAX_JOB_OUTPUTS_BYTES x MAX_LIVE_JOBS would be far more): a success past it fails
its attempt, saying so, until retention forgets finished jobs."""

REPORT_BATCH_MAX_OUTPUTS_BYTES = 4 * 1024 * 1024
"""Outputs one Report call carries at most (a batch stops before the report that would pass it,
and always holds at least one): inside MAX_MESSAGE_BYTES."""

MAX_DELIVERED_INPUTS_BYTES = 8 * 1024 * 1024
"""Inputs ($RAFTSCHED_INPUTS) one heartbeat answer carries: assignments past it wait for the
next delivery (one always goes; a task's inputs are bounded by MAX_JOB_OUTPUTS_BYTES plus its
upstream ids), so an answer stays inside MAX_MESSAGE_BYTES."""

MAX_FOR_EACH_CHARS = 1_024
"""A task's `for_each` text."""

MAX_FOR_EACH_ITEMS = 1_000
"""Instances one `for_each` task expands into at most: a longer list fails the task, saying
so, and nothing of it is expanded."""

MAX_INSTANCES_PER_JOB = 10_000
"""Instances all the `for_each` tasks of one job expand into, together (and the job's tasks
with them stay within MAX_TASKS_PER_JOB): past it the expanding task fails, saying so."""


# --- Job parameters (issue 26, item 3) ---------------------------------------------------------

MAX_PARAMS_PER_JOB = 64
"""A job spec's `params:` has at most this many names."""

MAX_PARAM_NAME_CHARS = 64
"""A param's name (`[A-Za-z_][A-Za-z0-9_]*`) is at most this many characters."""

MAX_PARAM_VALUE_BYTES = 4096
"""A param's value (a default's canonical string, or a `--param` override) is at most this many
UTF-8 bytes."""

MAX_GROUPS = 64
"""Scheduler groups (independent Raft groups, each owning some of the jobs: issue 27) one
deployment may have. An agent keys an attempt by (group, fence) as `fence * MAX_GROUPS + group`
(`agent.groups.local_key`), so this bound is part of that key's shape: never lower it."""

MAX_KEYS_PER_IMPORT = 2_000
"""Idempotency keys one KEYS_IMPORT entry carries (a shard move hands its keys over in entries
of at most this many: about 1 MB each, under gRPC's 4 MB message and MAX_ENTRY_BYTES)."""

VIRTUAL_SHARDS = 4_096
"""Shards a deployment's jobs are spread over (`raftsched.topology`), fixed forever: shard s
belongs to group s mod K. A job id carries its shard in three hex digits, so this is part of
the id's shape: never change it."""
