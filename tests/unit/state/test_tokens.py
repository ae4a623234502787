"""API tokens in the replicated state: TOKEN_PUT and TOKEN_REVOKE, each rule and each rejection.

Every rejection is checked to change nothing: the snapshot digest before and after is the same.
(Like every command, a rejected one still raises the state's clock to its `now_ms`; these carry
the time the state already has.)
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state import fsm, snapshot
from raftsched.state.model import (
    ALL_TENANTS,
    TOKEN_DIGEST_BYTES,
    TOKEN_ID_CHARS,
    Role,
    State,
    TokenRecord,
)
from raftsched.state.outcome import Rejected
from raftsched.state.queries import honoured_role, token_of
from raftsched.state.results import TokenPutResult, TokenRevokeResult
from raftsched.state.rules import token_put_problem, token_scope_problem
from tests.support.fsmkit import Harness

ADMIN = "a000000000000001"
ADMIN_2 = "a000000000000002"
USER = "b000000000000001"
DIGEST = hashlib.sha256(b"secret").digest()
OTHER_DIGEST = hashlib.sha256(b"another secret").digest()


def tid(n: int) -> str:
    return f"{n:0{TOKEN_ID_CHARS}x}"


def put(h: Harness, token_id: str = USER, *, digest: bytes = DIGEST, tenant: str | None = None,
        role: str = "user", note: str = "", bootstrap: bool = False) -> c.TokenPut:
    """A TOKEN_PUT; by default of tenant alpha for a user, of every tenant for another role."""
    if tenant is None:
        tenant = "alpha" if role == "user" else ALL_TENANTS
    return c.TokenPut(token_id, digest, tenant, role, note, h.now_ms, bootstrap)


def revoke(h: Harness, token_id: str) -> c.TokenRevoke:
    return c.TokenRevoke(token_id, h.now_ms)


def created(h: Harness, cmd: c.TokenPut) -> bool:
    result = h.expect(cmd, TokenPutResult)
    assert result.token_id == cmd.token_id
    return result.created


def refused(h: Harness, cmd: c.Command, code: Code, fragment: str) -> str:
    """`cmd` is rejected with `code` and a reason holding `fragment`, and changes nothing."""
    before = snapshot.digest(h.state)
    outcome = h.run(cmd)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == code, outcome
    assert fragment in outcome.reason, outcome.reason
    assert snapshot.digest(h.state) == before
    return outcome.reason


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.tick()  # the state's clock at the harness's: a rejection then moves nothing at all
    return harness


def test_the_public_names_the_grpc_side_uses() -> None:
    assert [(r.name, r.value) for r in Role] == [
        ("USER", "user"), ("OPERATOR", "operator"), ("ADMIN", "admin")]
    assert (ALL_TENANTS, TOKEN_ID_CHARS, TOKEN_DIGEST_BYTES) == ("*", 16, 32)
    assert (limits.MAX_TOKENS, limits.MAX_TOKEN_NOTE_CHARS) == (1_000, 200)
    assert State().tokens == {}


# --- put ----------------------------------------------------------------------------------------


def test_put_creates_a_token(h: Harness) -> None:
    assert token_of(h.state, USER) is None
    assert created(h, put(h, note="ci runner"))
    record = token_of(h.state, USER)
    assert record == TokenRecord(USER, DIGEST, "alpha", Role.USER, h.now_ms, "ci runner")
    assert record is not None and type(record.role) is Role


@pytest.mark.parametrize("tenant", ["*", "alpha", "0team", "a.b-c_d", "t" * limits.MAX_ID_CHARS])
def test_a_user_token_for_every_tenant_form(h: Harness, tenant: str) -> None:
    assert created(h, put(h, tenant=tenant, role="user"))
    assert h.state.tokens[USER].role == Role.USER and h.state.tokens[USER].tenant == tenant


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_operator_and_admin_tokens_are_of_every_tenant_only(h: Harness, role: str) -> None:
    """The Admin RPCs act on every tenant: such a token of one tenant would not be kept in it
    (issue 21, finding 3). The replicas refuse to propose one (`token_scope_problem`); apply
    keeps one as older versions did, so that their logs replay the same, and it is honoured
    only as a user of its tenant."""
    assert created(h, put(h, tenant="*", role=role))
    assert h.state.tokens[USER].role == Role(role)
    assert token_scope_problem(put(h, ADMIN, tenant="alpha", role=role)) == (
        f"role: an {role} token acts for every tenant, so its tenant must be '*', got "
        "tenant 'alpha': give --tenant '*', or --role user for a token of tenant 'alpha'")
    assert token_scope_problem(put(h, ADMIN, tenant="*", role=role)) is None
    assert created(h, put(h, ADMIN, tenant="alpha", role=role))
    assert honoured_role(h.state.tokens[ADMIN]) == Role.USER


def test_tokens_keep_creation_order_and_time(h: Harness) -> None:
    for n in (5, 1, 3):
        created(h, put(h, tid(n)))
        h.tick(10)
    h.ok(revoke(h, tid(1)))
    created(h, put(h, tid(1)))
    assert list(h.state.tokens) == [tid(5), tid(3), tid(1)]
    assert [t.created_ms for t in h.state.tokens.values()] == [1_000, 1_020, 1_030]


def test_an_identical_retry_changes_nothing(h: Harness) -> None:
    assert created(h, put(h, note="first"))
    before = snapshot.digest(h.state)
    h.tick(50)
    after_tick = snapshot.digest(h.state)
    assert not created(h, put(h, note="a retry may carry another note"))
    assert snapshot.digest(h.state) == after_tick != before
    assert h.state.tokens[USER].note == "first" and h.state.tokens[USER].created_ms == 1_000


@pytest.mark.parametrize(("change", "fragment"), [
    ({"digest": OTHER_DIGEST}, "a different digest"),
    ({"tenant": "beta"}, "a different tenant ('alpha', not 'beta')"),
    ({"tenant": "*"}, "a different tenant ('alpha', not '*')"),
    ({"tenant": "*", "role": "admin"},
     "a different tenant ('alpha', not '*'), role ('user', not 'admin')"),
    ({"digest": OTHER_DIGEST, "tenant": "*", "role": "operator"}, "a different digest, tenant"),
])
def test_the_same_id_with_other_values_already_exists(h: Harness, change: dict[str, object],
                                                     fragment: str) -> None:
    created(h, put(h))
    reason = refused(h, dataclasses.replace(put(h), **change), Code.ALREADY_EXISTS,
                     f"token {USER} already exists with {fragment}")
    assert DIGEST.hex() not in reason and OTHER_DIGEST.hex() not in reason


_LONG_NOTE = "n" * (limits.MAX_TOKEN_NOTE_CHARS + 1)


@pytest.mark.parametrize(("change", "fragment"), [
    ({"token_id": ""}, "token_id: must be 16 lowercase hex characters, got ''"),
    ({"token_id": "A000000000000001"}, "token_id: must be 16 lowercase hex"),
    ({"token_id": "a00000000000001"}, "token_id: must be 16 lowercase hex"),
    ({"token_id": "a0000000000000011"}, "token_id: must be 16 lowercase hex"),
    ({"token_id": "g000000000000001"}, "token_id: must be 16 lowercase hex"),
    ({"token_id": " 000000000000001"}, "token_id: must be 16 lowercase hex"),
    ({"digest": b""}, "digest: must be 32 bytes (the sha256 of the secret), got 0"),
    ({"digest": DIGEST[:-1]}, "digest: must be 32 bytes (the sha256 of the secret), got 31"),
    ({"digest": DIGEST + b"\x00"}, "digest: must be 32 bytes (the sha256 of the secret), got 33"),
    ({"digest": b"\x00" * 65}, "digest: longer than 64 bytes"),  # decode's bound
    ({"tenant": ""}, "tenant: a tenant name (or '*' for every tenant) must use only letters"),
    ({"tenant": "a b"}, "tenant: a tenant name (or '*' for every tenant) must use only"),
    ({"tenant": "-a"}, "starting with a letter or digit, got '-a'"),
    ({"tenant": "**"}, "tenant: a tenant name (or '*' for every tenant) must use only"),
    ({"tenant": "t" * (limits.MAX_ID_CHARS + 1)}, "tenant: longer than 128"),  # decode's bound
    ({"role": "root"}, "role: must be one of 'user', 'operator', 'admin', got 'root'"),
    ({"role": "Admin"}, "role: must be one of 'user', 'operator', 'admin', got 'Admin'"),
    ({"role": ""}, "role: must be one of"),
    ({"note": _LONG_NOTE}, "note: longer than 200 characters"),  # decode's bound
    ({"note": "two\nlines"}, "note: must be printable text (no control or format characters"),
    ({"note": "bell\x07"}, "note: must be printable text"),
    ({"bootstrap": True, "role": "user"}, "bootstrap: the bootstrap token must have role 'admin'"),
])
def test_malformed_puts_are_invalid_and_change_nothing(h: Harness, change: dict[str, object],
                                                       fragment: str) -> None:
    created(h, put(h, ADMIN, role="admin"))
    refused(h, dataclasses.replace(put(h), **change), Code.INVALID_ARGUMENT, fragment)


def test_apply_checks_the_note_bound_itself(h: Harness) -> None:
    """Decode bounds the note too; apply does not rely on it (a command built in memory)."""
    outcome = fsm.apply_command(h.state, put(h, note=_LONG_NOTE))
    assert outcome == Rejected(
        Code.INVALID_ARGUMENT, "note: must be at most MAX_TOKEN_NOTE_CHARS=200 characters, got 201")
    assert h.state.tokens == {}
    assert token_put_problem(put(h, note="n" * limits.MAX_TOKEN_NOTE_CHARS)) is None


def test_a_malformed_put_is_refused_even_for_an_existing_id(h: Harness) -> None:
    created(h, put(h))
    refused(h, put(h, note="\x00"), Code.INVALID_ARGUMENT, "note: must be printable")


def test_the_token_bound(h: Harness) -> None:
    h.check_every = 250  # the invariant check is O(tokens)
    for n in range(limits.MAX_TOKENS):
        assert created(h, put(h, tid(n)))
    refused(h, put(h, tid(limits.MAX_TOKENS)), Code.RESOURCE_EXHAUSTED,
            "1000 tokens held, the bound MAX_TOKENS=1000: revoke one first")
    refused(h, put(h, ADMIN, role="admin", bootstrap=True), Code.RESOURCE_EXHAUSTED,
            "MAX_TOKENS")
    assert not created(h, put(h, tid(7)))  # a retry of an existing one still answers
    h.ok(revoke(h, tid(7)))
    assert created(h, put(h, tid(limits.MAX_TOKENS)))
    assert len(h.state.tokens) == limits.MAX_TOKENS


# --- bootstrap ----------------------------------------------------------------------------------


def test_bootstrap_creates_the_first_admin_then_is_a_no_op(h: Harness) -> None:
    cmd = put(h, ADMIN, tenant="*", role="admin", note="bootstrap", bootstrap=True)
    assert created(h, cmd)
    assert h.state.tokens[ADMIN].role == Role.ADMIN
    before = snapshot.digest(h.state)
    for _ in range(3):  # every later office-taking proposes it again
        assert not created(h, cmd)
    assert snapshot.digest(h.state) == before


def test_bootstrap_changes_nothing_once_any_admin_exists(h: Harness) -> None:
    created(h, put(h, ADMIN, role="admin"))
    before = snapshot.digest(h.state)
    # another id, or the same id with another secret (the file changed): no effect either way
    assert not created(h, put(h, ADMIN_2, digest=OTHER_DIGEST, role="admin", bootstrap=True))
    assert not created(h, put(h, ADMIN, digest=OTHER_DIGEST, role="admin", bootstrap=True))
    assert snapshot.digest(h.state) == before
    assert list(h.state.tokens) == [ADMIN] and h.state.tokens[ADMIN].digest == DIGEST


def test_bootstrap_applies_while_only_non_admin_tokens_exist(h: Harness) -> None:
    created(h, put(h, USER, role="operator"))
    assert created(h, put(h, ADMIN, role="admin", bootstrap=True))
    assert list(h.state.tokens) == [USER, ADMIN]


def test_bootstrap_of_an_existing_non_admin_id_already_exists(h: Harness) -> None:
    created(h, put(h, USER, role="operator"))
    refused(h, put(h, USER, role="admin", bootstrap=True), Code.ALREADY_EXISTS,
            "a different role ('operator', not 'admin')")


# --- revoke -------------------------------------------------------------------------------------


def test_revoke_removes_the_token(h: Harness) -> None:
    created(h, put(h, ADMIN, role="admin"))
    created(h, put(h, USER))
    assert h.expect(revoke(h, USER), TokenRevokeResult) == TokenRevokeResult(USER)
    assert token_of(h.state, USER) is None and list(h.state.tokens) == [ADMIN]
    assert created(h, put(h, USER, digest=OTHER_DIGEST))  # the id is free again


def test_revoking_an_absent_token_is_not_found(h: Harness) -> None:
    refused(h, revoke(h, USER), Code.NOT_FOUND, f"token '{USER}' not found")
    created(h, put(h, USER))
    h.ok(revoke(h, USER))
    refused(h, revoke(h, USER), Code.NOT_FOUND, "not found")  # a retried revoke
    refused(h, revoke(h, "not a token id"), Code.NOT_FOUND, "not found")


def test_the_last_admin_token_cannot_be_revoked(h: Harness) -> None:
    created(h, put(h, ADMIN, role="admin", bootstrap=True))
    created(h, put(h, USER, tenant="*", role="operator"))
    refused(h, revoke(h, ADMIN), Code.FAILED_PRECONDITION,
            f"token {ADMIN} is the last admin token: without one the cluster cannot be managed")
    created(h, put(h, ADMIN_2, digest=OTHER_DIGEST, role="admin"))
    h.ok(revoke(h, ADMIN))
    refused(h, revoke(h, ADMIN_2), Code.FAILED_PRECONDITION, "the last admin token")
    h.ok(revoke(h, USER))  # a non-admin goes whatever is left
    assert list(h.state.tokens) == [ADMIN_2]


def test_an_admin_of_one_tenant_from_an_older_state_acts_as_a_user(h: Harness) -> None:
    """Such a token can no longer be made, but a state may hold one: it is honoured as a user
    of its tenant, so it is not an admin for the last-admin rule or for the bootstrap."""
    h.state.tokens[ADMIN] = TokenRecord(ADMIN, DIGEST, "alpha", Role.ADMIN, h.now_ms, "old")
    assert honoured_role(h.state.tokens[ADMIN]) == Role.USER
    assert created(h, put(h, ADMIN_2, digest=OTHER_DIGEST, role="admin", bootstrap=True))
    refused(h, revoke(h, ADMIN_2), Code.FAILED_PRECONDITION, "last admin")
    h.ok(revoke(h, ADMIN))
    assert list(h.state.tokens) == [ADMIN_2]


# --- through the log ----------------------------------------------------------------------------


def test_replicas_agree_and_snapshots_carry_tokens(h: Harness) -> None:
    created(h, put(h, ADMIN, tenant="*", role="admin", bootstrap=True))
    created(h, put(h, USER, note="ci"))
    h.run(revoke(h, ADMIN))  # refused: the last admin
    h.run(put(h, USER, role="admin"))  # refused: exists
    other = State()
    for entry in h.log:
        fsm.apply(other, entry)
    assert snapshot.dump(other) == snapshot.dump(h.state)
    assert snapshot.load(snapshot.dump(h.state)).tokens == h.state.tokens
