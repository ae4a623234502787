"""Revoked client certificates in the replicated state: CERT_REVOKE, its rules and rejections,
and its place in snapshots (absent when empty, so older snapshots stay byte for byte).

Every rejection changes nothing: the snapshot digest before and after is the same."""

from __future__ import annotations

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.invariants import check_invariants
from raftsched.state.model import RevokedCert, State
from raftsched.state.results import CertRevoked
from tests.support.fsmkit import Harness

FINGERPRINT = "ab" * 32
OTHER = "cd" * 32


@pytest.fixture
def h() -> Harness:
    harness = Harness(State())
    harness.tick()  # the state's clock at the harness's: a rejection then moves nothing at all
    return harness


def test_a_revocation_is_remembered_in_order_and_a_second_one_is_no_error(h: Harness) -> None:
    assert h.ok(c.CertRevoke(FINGERPRINT, "raftsched-agent:east", "stolen laptop", h.now_ms)) \
        == CertRevoked(FINGERPRINT, created=True)
    h.now_ms += 1_000
    h.ok(c.CertRevoke(OTHER, "raftsched-user:ana", "", h.now_ms))
    assert h.ok(c.CertRevoke(FINGERPRINT, "someone else", "again", h.now_ms)) \
        == CertRevoked(FINGERPRINT, created=False)
    assert list(h.state.revoked_certs) == [FINGERPRINT, OTHER]
    assert h.state.revoked_certs[FINGERPRINT] == RevokedCert(
        FINGERPRINT, "raftsched-agent:east", "stolen laptop", h.now_ms - 1_000)
    check_invariants(h.state)


@pytest.mark.parametrize(("fingerprint", "subject", "reason", "fragment"), [
    ("AB" * 32, "", "", "fingerprint: must be the sha256"),
    ("ab" * 31, "", "", "fingerprint: must be the sha256"),
    ("zz" * 32, "", "", "fingerprint: must be the sha256"),
    (FINGERPRINT, "x" * (limits.MAX_CERT_SUBJECT_CHARS + 1), "", "subject: "),
    (FINGERPRINT, "", "r" * (limits.MAX_REASON_CHARS + 1), "reason: "),
])
def test_a_malformed_revocation_is_refused_naming_the_field_and_changes_nothing(
        h: Harness, fingerprint: str, subject: str, reason: str, fragment: str) -> None:
    before = snapshot.digest(h.state)
    outcome = h.run(c.CertRevoke(fingerprint, subject, reason, h.now_ms))
    assert getattr(outcome, "code", None) == Code.INVALID_ARGUMENT, outcome
    assert fragment in getattr(outcome, "reason", ""), outcome
    assert snapshot.digest(h.state) == before


def test_the_bound_is_resource_exhausted(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_REVOKED_CERTS", 2)
    h.ok(c.CertRevoke("01" * 32, "", "", h.now_ms))
    h.ok(c.CertRevoke("02" * 32, "", "", h.now_ms))
    before = snapshot.digest(h.state)
    outcome = h.run(c.CertRevoke("03" * 32, "", "", h.now_ms))
    assert getattr(outcome, "code", None) == Code.RESOURCE_EXHAUSTED, outcome
    assert "MAX_REVOKED_CERTS=2" in getattr(outcome, "reason", "")
    assert h.ok(c.CertRevoke("01" * 32, "", "", h.now_ms)).created is False  # still fine
    assert snapshot.digest(h.state) == before


def test_snapshots_carry_revocations_and_are_unchanged_without_any(h: Harness) -> None:
    empty = snapshot.dump(h.state)
    h.ok(c.CertRevoke(FINGERPRINT, "raftsched-agent:east", "stolen", h.now_ms))
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert loaded.revoked_certs == h.state.revoked_certs
    assert snapshot.dump(loaded) == data and data != empty
    assert snapshot.digest(loaded) == snapshot.digest(h.state)
    assert snapshot.load(empty).revoked_certs == {}
