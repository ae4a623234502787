"""Helpers of `scripts/bench peers` (scripts/bench_peers.py).

`workloads`, `processes`, `stats` and `protocol` use the standard library only, so that the
raftsched runner (raftsched's virtualenv) and the Dask and Celery runners (.venv-peers) build the
very same seeded workloads and speak the same JSON. Each runner is a module run as
`python -m peerbench.<system>_runner PLAN_JSON`; it prints one JSON line of results on stdout.
"""
