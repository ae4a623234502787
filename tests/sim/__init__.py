"""A deterministic, seeded simulation of the scheduler's control plane (tests, tier 2).

No network, no threads, no real time: the real state machine (`raftsched.state.fsm.apply`), the
real leader loop (`raftsched.replica.leader.Leader._round`) and the real agent core
(`agent.core.AgentCore`) over in-memory stores and simulated processes (`machine.py`), driven by
a fake replicated log (`log.py`) and a seeded world (`world.py`) that injects leader changes,
lost/duplicated/delayed/replayed/mangled messages, agent crashes and partitions under a manual
clock. A seed replays a run exactly.
"""
