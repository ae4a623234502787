"""Submits and idempotency: every acknowledged submit is in the log once per idempotency key. (Part
of `jepsen.checker`.)"""

from __future__ import annotations

from jepsen.checks_history import Op, _Findings
from jepsen.checks_replay import _Replay

# --- submissions --------------------------------------------------------------------------------


def check_submissions(ops: list[Op], run: _Replay, found: _Findings) -> None:
    by_key: dict[tuple[str, str], list[Op]] = {}
    for op in ops:
        if op.f == "submit":
            value = op.value()
            by_key.setdefault((str(value.get("tenant")), str(value.get("key"))), []).append(op)
    reported = {k for v in run.auditor.violations if v.check == "idempotency_key_unique"
                for k in v.keys[:1]}
    for (tenant, key), tries in by_key.items():
        _check_key(tenant, key, tries, run, reported, found)


def _check_key(tenant: str, key: str, tries: list[Op], run: _Replay, reported: set[str],
               found: _Findings) -> None:
    acked = [op for op in tries if op.outcome == "ok"]
    created = run.auditor.key_jobs.get((tenant, key), [])
    label = f"key={tenant}/{key}"
    found.count("submit_ack_consistent")
    named = {str(op.result().get("job_id")) for op in acked}
    if len(named) > 1:
        found.violate("submit_ack_consistent",
                      f"submissions of key {key!r} (tenant {tenant}) were acknowledged with "
                      f"different job ids {sorted(named)} (ops i="
                      f"{', '.join(str(op.done['i']) for op in acked if op.done)})",
                      ops=[op.done["i"] for op in acked if op.done], keys=(label,))
    for op in acked:
        _check_acked(op, tenant, key, run, found)
    if tries and all(op.outcome == "fail" for op in tries):
        found.count("submit_failed_absent")
        if created:
            found.violate("submit_failed_absent",
                          f"every submission of key {key!r} (tenant {tenant}) failed (ops i="
                          f"{', '.join(str(op.done['i']) for op in tries if op.done)}), yet the "
                          f"log created job {created[0]} at index "
                          f"{run.auditor.created[created[0]].index}",
                          ops=[op.done["i"] for op in tries if op.done],
                          indices=(run.auditor.created[created[0]].index,), keys=(label,))
    found.count("submit_one_job_per_key")
    if len(created) > 1 and label not in reported:
        found.violate("submit_one_job_per_key",
                      f"key {key!r} (tenant {tenant}) created {len(created)} jobs: "
                      + ", ".join(f"{j} at log index {run.auditor.created[j].index}"
                                  for j in created)
                      + " (the first one's key record had expired or been dropped)",
                      indices=[run.auditor.created[j].index for j in created], keys=(label,))


def _check_acked(op: Op, tenant: str, key: str, run: _Replay, found: _Findings) -> None:
    assert op.done is not None
    job_id = str(op.result().get("job_id"))
    created = run.auditor.created.get(job_id)
    found.count("submit_acked_present")
    if created is not None and (created.tenant, created.key) == (tenant, key):
        return
    if created is None and not run.complete:
        found.note(f"submit i={op.done['i']} acknowledged job {job_id}, not in the replayed "
                   f"part of the log (replay incomplete)")
        return
    where = "is in no log" if created is None else \
        f"was created at log index {created.index} under key {created.tenant}/{created.key}"
    found.violate("submit_acked_present",
                  f"submit i={op.done['i']} (client {op.process}) of key {key!r} (tenant "
                  f"{tenant}) was acknowledged as job {job_id}, which {where}",
                  ops=(op.invoke["i"], op.done["i"]), keys=(job_id, f"key={tenant}/{key}"))
