"""raftsched: a Raft-replicated, fenced DAG job scheduler."""
