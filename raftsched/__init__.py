"""raftsched: a Raft-replicated, fenced DAG job scheduler."""

import os as _os

# gRPC's fork support (on by default in grpcio 1.85) runs handlers in a forked child that start
# threads of its own; in a replica's snapshot child — forked from the Raft tick thread while gRPC
# calls are in flight — they crashed the child with SIGSEGV after it had written the snapshot,
# about one dump in two under load (measured: tests/integration/test_snapshot_backup.py). Our
# forked children never use gRPC, so the support is turned off, before any gRPC import: every
# entry point imports this package first. An explicit setting in the environment is kept.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
