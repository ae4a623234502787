"""A deterministic, seeded simulation of the scheduler's control plane (tests, tier 2).

No network, no threads, no real time: the real state machine (`raftsched.fsm.apply`), the real
leader loop (`raftsched.leader.Leader._round`) and in-memory agents that follow the real agent
rules (`agent.fence.admit`), driven by a fake replicated log (`log.py`) and a seeded world
(`world.py`) that injects leader changes, lost/duplicated/delayed messages, agent crashes and
partitions under a manual clock. A seed replays a run exactly.
"""
