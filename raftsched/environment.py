"""The `RAFTSCHED_*` environment variables: each name defined once, here.

A shared leaf below every other module (it imports nothing): the CLI, the console, the replica,
the agent, the dev cluster, the TLS and token helpers and the job spec's reserved prefix all
read these names from here, so a variable cannot be renamed in one place and not in another.
(The Raft adapter's failpoint latches stay beside the code they stop: `replica/raft/node.py`.)
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "RAFTSCHED_"
"""Every variable of ours starts with it; a job spec's `env` may not set one (reserved)."""

# --- how a client, the console and an agent reach the replicas --------------------------------

SERVERS_ENV: Final = "RAFTSCHED_SERVERS"
"""The replicas' gRPC addresses, comma-separated (the default of every `--servers`)."""

TOKEN_ENV: Final = "RAFTSCHED_TOKEN"
"""A user's API token (`rst_<16 hex>_<secret>`), the default of `--token`."""

TLS_CA_ENV: Final = "RAFTSCHED_TLS_CA"
"""The cluster's CA bundle (PEM path), the default of `--tls-ca`."""

TLS_CERT_ENV: Final = "RAFTSCHED_TLS_CERT"
"""This process's certificate (PEM path), the default of `--tls-cert`."""

TLS_KEY_ENV: Final = "RAFTSCHED_TLS_KEY"
"""This process's private key (PEM path), the default of `--tls-key`."""

TLS_ENV: Final = (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV)
"""The three TLS variables, in the order CA, certificate, key."""

# --- the processes' own settings --------------------------------------------------------------

SECRET_ENV: Final = "RAFTSCHED_SECRET"
"""The replicas' shared Raft secret (the default of `raftsched replica --secret`)."""

AGENT_DATA_DIR_ENV: Final = "RAFTSCHED_AGENT_DATA_DIR"
"""The agent's data directory, the default of `raftsched agent --data-dir`."""

DEV_DIR_ENV: Final = "RAFTSCHED_DEV_DIR"
"""The local dev cluster's directory (default ./.raftsched-dev)."""

WALL_CLOCK_SKEW_ENV: Final = "RAFTSCHED_FAILPOINT_WALL_CLOCK_SKEW_S"
"""Fault injection: seconds (either sign) added to this process's wall clock (`raftsched.clock`).
The jepsen-style harness sets it for its clock-skew faults (libfaketime breaks CPython's timed
waits: sleeps fail with EINVAL and condition waits hang). Monotonic time is never skewed."""

# --- what an agent hands to a task ------------------------------------------------------------

TASK_JOB_ID_ENV: Final = "RAFTSCHED_JOB_ID"
TASK_TASK_ID_ENV: Final = "RAFTSCHED_TASK_ID"
TASK_ATTEMPT_ENV: Final = "RAFTSCHED_ATTEMPT"
TASK_FENCE_ENV: Final = "RAFTSCHED_FENCE"
TASK_IDEMPOTENCY_KEY_ENV: Final = "RAFTSCHED_IDEMPOTENCY_KEY"
TASK_CHECKPOINT_DIR_ENV: Final = "RAFTSCHED_CHECKPOINT_DIR"
"""A directory that survives the task's attempts on one agent (`checkpoint: true` tasks)."""
TASK_OUTPUT_ENV: Final = "RAFTSCHED_OUTPUT"
"""The file (in the attempt's private dir) a task may write its outputs to: one JSON object,
read by the agent after the task exits 0 (`agent/outputs.py`)."""
TASK_INPUTS_ENV: Final = "RAFTSCHED_INPUTS"
"""The file (in the attempt's private dir) holding the task's inputs: one JSON object mapping each
upstream task id to its outputs, written by the agent before the task starts."""
