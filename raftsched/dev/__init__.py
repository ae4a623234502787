"""Running real processes locally: the process supervisor and the dev cluster (`raftsched dev
up|add-agent|add-group|status|down`): one module per verb (`up`, `add_agent`, `add_group`,
`status`, `down`), the record (`record`: the state file, its lock, the shapes), the processes
(`processes`: commands, spawning, probing), readiness (`launch`) and what `add_group` asks of
the cluster (`group_calls`: drains, an agent's metrics, the shard move).

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

`add_group` grows the running cluster by one scheduler group (docs/scale-out.md §5): the new
group's replicas, recorded as joining until its shards are moved to it, every agent restarted in
turn to serve every group, then the move; see its module.

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
