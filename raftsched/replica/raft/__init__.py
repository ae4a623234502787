"""The Raft adapter over pysyncobj 0.3.17: the durable journal, the syncing transport, the node.
Nothing outside this package imports pysyncobj (checked in CI)."""
