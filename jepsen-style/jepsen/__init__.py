"""raftsched's jepsen-style fault-injection harness: the cluster under test in network
namespaces, the workload, the nemesis, the JSONL history and its checker. Run it with
`jepsen-style/run --help`."""
