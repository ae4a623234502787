"""A local cluster of real processes for development and the demo: `raftsched dev
up|add-agent|status|down`.

`up` starts 3 or 5 replicas (`python -m raftsched replica`) and N agents (`python -m raftsched
agent`) in the background through the process supervisor (`raftsched.dev.supervisor`): each in
its own session, its output appended to DIR/logs/NAME.log, all on ephemeral ports of 127.0.0.1,
with a fresh random cluster secret in DIR/secret (mode 0600, passed as --secret-file) and a fresh
throwaway CA in DIR/tls (`raftsched.dev.pki`) that signs the replicas' certificate (127.0.0.1,
localhost), one per agent (raftsched-agent:CLUSTER) and one for the local user
(raftsched-user:LOGIN), which the state file records so that the CLI finds it. `up --insecure-dev`
makes none of these: every process runs with --insecure-dev (plaintext, no secret). It waits,
up to a named timeout, until a replica says it leads and every agent's cluster is READY; on any
failure it stops what it started and raises a `DevClusterError` carrying the tail of the log
that explains it. `up --slurm` first starts a private single-node Slurm in DIR/slurm
(`raftsched.dev.slurm`: munged, slurmctld, slurmd, each recorded as soon as it is spawned; the
node has cpu-east's size and its capabilities as features) and runs cpu-east's agent with
`--executor slurm --slurm-partition debug` and that Slurm's SLURM_CONF in its environment.

`add_agent` starts one more agent on the running cluster (a cluster of another id, size,
executor or custom resources, for tests, benchmarks and demos): it checks the shape by the
agent's own rules, issues its certificate from the CA in DIR/tls (`pki.load_authority`), spawns
it like `up` does, records it, and waits until its cluster is READY; on failure it stops the
agent and forgets it again. A Slurm agent (`executor="slurm"`) fronts a partition of the
cluster's own private Slurm, else of the Slurm SLURM_CONF names; its sizes and node features are
read from the partition first (`agent.executors.slurm.partition_capacity`), so a Slurm that does not
answer or has no such partition is refused before anything starts. `status` and `down` treat it
like any agent `up` started.

DIR/cluster.json records every process: its identity (pid and start time from /proc, see
`supervisor.Identity`) and addresses. `down` signals a pid only while /proc still shows that same
start time, so it never signals a process that merely reused the pid; it stops exactly those
processes (`supervisor.stop_all`: SIGTERM to the process group, a named wait, then SIGKILL),
removes the state file and nothing else (logs, secret and data stay), and is idempotent. The
private Slurm's daemons go last, once no agent submits any more: its jobs are cancelled through
its controller and their processes waited for, then the daemons stop the same way, slurmd
first (`raftsched.dev.slurm.stop_daemons`). Linux only (/proc).

A run's Raft and agent data go to DIR/data/RUN/NAME with a fresh RUN per `up`: a replica
restarted on an old data dir would remember the previous run's membership and ports.
"""


from __future__ import annotations

from raftsched.dev.add_agent import (
    AddAgentOptions as AddAgentOptions,
)
from raftsched.dev.add_agent import (
    add_agent as add_agent,
)
from raftsched.dev.add_agent import (
    check_resources as check_resources,
)
from raftsched.dev.add_agent import (
    machine_memory_mb as machine_memory_mb,
)
from raftsched.dev.add_agent import (
    parse_resources as parse_resources,
)
from raftsched.dev.add_agent import (
    recorded_state as recorded_state,
)
from raftsched.dev.add_agent import (
    requested_shape as requested_shape,
)
from raftsched.dev.down import (
    down as down,
)
from raftsched.dev.processes import (
    Certificates as Certificates,
)
from raftsched.dev.processes import (
    ClusterView as ClusterView,
)
from raftsched.dev.processes import (
    Probe as Probe,
)
from raftsched.dev.processes import (
    Spawn as Spawn,
)
from raftsched.dev.processes import (
    agent_command as agent_command,
)
from raftsched.dev.processes import (
    child_env as child_env,
)
from raftsched.dev.processes import (
    issue_certificates as issue_certificates,
)
from raftsched.dev.processes import (
    local_user_name as local_user_name,
)
from raftsched.dev.processes import (
    probe_cluster as probe_cluster,
)
from raftsched.dev.processes import (
    replica_command as replica_command,
)
from raftsched.dev.processes import (
    require_proc as require_proc,
)
from raftsched.dev.processes import (
    spawn_process as spawn_process,
)
from raftsched.dev.processes import (
    web_command as web_command,
)
from raftsched.dev.record import (
    ADMIN_TOKEN_FILE_NAME as ADMIN_TOKEN_FILE_NAME,
)
from raftsched.dev.record import (
    AGENT_EXECUTORS as AGENT_EXECUTORS,
)
from raftsched.dev.record import (
    DATA_DIR_NAME as DATA_DIR_NAME,
)
from raftsched.dev.record import (
    DEFAULT_AGENTS as DEFAULT_AGENTS,
)
from raftsched.dev.record import (
    DEFAULT_DEV_DIR as DEFAULT_DEV_DIR,
)
from raftsched.dev.record import (
    DEFAULT_EXECUTOR as DEFAULT_EXECUTOR,
)
from raftsched.dev.record import (
    DEFAULT_REPLICAS as DEFAULT_REPLICAS,
)
from raftsched.dev.record import (
    DEFAULT_USER_NAME as DEFAULT_USER_NAME,
)
from raftsched.dev.record import (
    DEV_DIR_ENV as DEV_DIR_ENV,
)
from raftsched.dev.record import (
    EXECUTORS as EXECUTORS,
)
from raftsched.dev.record import (
    FIRST_AGENTS as FIRST_AGENTS,
)
from raftsched.dev.record import (
    LOCK_FILE_NAME as LOCK_FILE_NAME,
)
from raftsched.dev.record import (
    LOG_DIR_NAME as LOG_DIR_NAME,
)
from raftsched.dev.record import (
    MAX_AGENTS as MAX_AGENTS,
)
from raftsched.dev.record import (
    MAX_CPU_CORES as MAX_CPU_CORES,
)
from raftsched.dev.record import (
    MAX_RECORDED_AGENTS as MAX_RECORDED_AGENTS,
)
from raftsched.dev.record import (
    MAX_USER_NAME_CHARS as MAX_USER_NAME_CHARS,
)
from raftsched.dev.record import (
    POLL_INTERVAL_S as POLL_INTERVAL_S,
)
from raftsched.dev.record import (
    PROBE_TIMEOUT_S as PROBE_TIMEOUT_S,
)
from raftsched.dev.record import (
    PROGRESS_EVERY_S as PROGRESS_EVERY_S,
)
from raftsched.dev.record import (
    READY as READY,
)
from raftsched.dev.record import (
    REPLICA_COUNTS as REPLICA_COUNTS,
)
from raftsched.dev.record import (
    RESERVED_ENV as RESERVED_ENV,
)
from raftsched.dev.record import (
    SECRET_BYTES as SECRET_BYTES,
)
from raftsched.dev.record import (
    SECRET_FILE_NAME as SECRET_FILE_NAME,
)
from raftsched.dev.record import (
    SLURM_AGENT as SLURM_AGENT,
)
from raftsched.dev.record import (
    SLURM_DIR_NAME as SLURM_DIR_NAME,
)
from raftsched.dev.record import (
    SLURM_EXECUTOR as SLURM_EXECUTOR,
)
from raftsched.dev.record import (
    STATE_FILE_NAME as STATE_FILE_NAME,
)
from raftsched.dev.record import (
    STATE_VERSION as STATE_VERSION,
)
from raftsched.dev.record import (
    TLS_DIR_NAME as TLS_DIR_NAME,
)
from raftsched.dev.record import (
    TRAVERSE_BITS as TRAVERSE_BITS,
)
from raftsched.dev.record import (
    UP_TIMEOUT_S as UP_TIMEOUT_S,
)
from raftsched.dev.record import (
    WEB_NAME as WEB_NAME,
)
from raftsched.dev.record import (
    WEB_WATCH_TOKEN_FILE_NAME as WEB_WATCH_TOKEN_FILE_NAME,
)
from raftsched.dev.record import (
    AgentEntry as AgentEntry,
)
from raftsched.dev.record import (
    AgentShape as AgentShape,
)
from raftsched.dev.record import (
    ClusterState as ClusterState,
)
from raftsched.dev.record import (
    DaemonEntry as DaemonEntry,
)
from raftsched.dev.record import (
    DevClusterError as DevClusterError,
)
from raftsched.dev.record import (
    Progress as Progress,
)
from raftsched.dev.record import (
    ReplicaEntry as ReplicaEntry,
)
from raftsched.dev.record import (
    Resources as Resources,
)
from raftsched.dev.record import (
    SlurmEntry as SlurmEntry,
)
from raftsched.dev.record import (
    TlsPaths as TlsPaths,
)
from raftsched.dev.record import (
    WebEntry as WebEntry,
)
from raftsched.dev.record import (
    agent_shapes as agent_shapes,
)
from raftsched.dev.record import (
    default_dir as default_dir,
)
from raftsched.dev.record import (
    exclusive as exclusive,
)
from raftsched.dev.record import (
    load_state as load_state,
)
from raftsched.dev.record import (
    save_state as save_state,
)
from raftsched.dev.record import (
    servers_from_state as servers_from_state,
)
from raftsched.dev.record import (
    state_path as state_path,
)
from raftsched.dev.record import (
    write_secret as write_secret,
)
from raftsched.dev.status import (
    agent_doc as agent_doc,
)
from raftsched.dev.status import (
    cluster_doc as cluster_doc,
)
from raftsched.dev.status import (
    metrics_url as metrics_url,
)
from raftsched.dev.status import (
    slurm_doc as slurm_doc,
)
from raftsched.dev.status import (
    status as status,
)
from raftsched.dev.status import (
    web_doc as web_doc,
)
from raftsched.dev.supervisor import StopOutcome as StopOutcome
from raftsched.dev.supervisor import StopResult as StopResult
from raftsched.dev.up import (
    UpOptions as UpOptions,
)
from raftsched.dev.up import (
    WebToken as WebToken,
)
from raftsched.dev.up import (
    create_web_watch_token as create_web_watch_token,
)
from raftsched.dev.up import (
    traversable as traversable,
)
from raftsched.dev.up import (
    up as up,
)
