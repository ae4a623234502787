"""One scheduler replica: the Raft adapter (`raft/`, the only pysyncobj importer), the leader
loop, the agent gateway, the gRPC servicers and views, metrics, and the process wiring."""
