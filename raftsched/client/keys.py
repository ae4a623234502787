"""The idempotency key of a submit, one rule for the client and the CLI (no grpc here: the CLI
imports it at start-up). The replica makes no key of its own: a retry must carry the first
try's key, so the key is made once, before the first try, by whoever sends."""

from __future__ import annotations

import uuid

from raftsched.spec.model import JobSpec


def submit_key(given: str | None, spec: JobSpec) -> str:
    """The one rule for a submit's idempotency key (the client's and the CLI's): the key given
    with the call (`--idempotency-key`), else the spec's own `idempotency_key`, else a fresh
    `auto-<32 hex digits>`, made once per submit before its first try, so that every retry of
    an unknown outcome carries it and cannot create a second job."""
    return given or spec.idempotency_key or f"auto-{uuid.uuid4().hex}"
