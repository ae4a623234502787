"""The replicated state machine and everything pure around it: the log's commands, the state's
records, `fsm.apply`, the one feasibility rule, placement, snapshots, invariants and the log
auditor. Imports no clock, randomness, os, grpc, lmdb or pysyncobj (checked in CI)."""
