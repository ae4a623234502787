"""Job specs: parsing, validation (every error named), DAG checks, and the compact wire form the
Raft log carries. Pure: imports nothing but the shared leaves."""
