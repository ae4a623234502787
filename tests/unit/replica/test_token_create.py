"""CreateToken with a token the caller made (issue 27: the same token in every group): the
replica records its id and digest and never sees its secret; the same again is no error, a
different digest is ALREADY_EXISTS, half a token or a malformed digest is refused by field and
proposes nothing."""

from __future__ import annotations

import grpc
import pytest

from raftsched import tokens
from raftsched.api import raftsched_pb2 as pb
from tests.unit.replica.test_service import FakeContext, make_replica, refused


def test_a_caller_made_token_is_recorded_by_its_digest_and_works_for_its_secret() -> None:
    replica = make_replica()
    made = tokens.new_token()
    request = pb.CreateTokenRequest(tenant="alpha", role="user", note="ci",
                                    token_id=made.token_id, digest=made.digest.hex())
    reply = replica.admin.CreateToken(request, FakeContext())
    assert (reply.token_id, reply.token) == (made.token_id, "")
    record = replica.node.state.tokens[made.token_id]
    assert record.digest == made.digest and record.tenant == "alpha"
    parsed = tokens.parse_token(made.token)
    assert parsed is not None and tokens.secret_digest(parsed[1]) == record.digest
    again = replica.admin.CreateToken(request, FakeContext())  # a retry, or another group's
    assert again.token_id == made.token_id
    other = tokens.new_token()
    abort, _ = refused(replica.admin.CreateToken, pb.CreateTokenRequest(
        tenant="alpha", role="user", token_id=made.token_id, digest=other.digest.hex()))
    assert abort.code == grpc.StatusCode.ALREADY_EXISTS
    assert replica.node.state.tokens[made.token_id].digest == made.digest


@pytest.mark.parametrize(("token_id", "digest", "words"), [
    ("0123456789abcdef", "", "digest: a token made by the caller needs both"),
    ("", "ab" * 32, "token_id: a token made by the caller needs both"),
    ("0123456789abcdef", "AB" * 32, "digest: must be the sha256 of the secret as 64"),
    ("0123456789abcdef", "ab" * 31, "digest: must be the sha256"),
    ("NOT-HEX-ID", "ab" * 32, "token_id: must be 16 lowercase hex"),
])
def test_half_a_token_or_a_malformed_one_is_refused_by_field_and_proposes_nothing(
        token_id: str, digest: str, words: str) -> None:
    replica = make_replica()
    proposed = list(replica.node.proposed)
    abort, _ = refused(replica.admin.CreateToken, pb.CreateTokenRequest(
        tenant="alpha", role="user", token_id=token_id, digest=digest))
    assert abort.code == grpc.StatusCode.INVALID_ARGUMENT
    assert words in abort.details, abort.details
    assert replica.node.proposed == proposed and not replica.node.state.tokens


def test_a_token_made_here_is_answered_with_its_secret_as_before() -> None:
    replica = make_replica()
    reply = replica.admin.CreateToken(pb.CreateTokenRequest(tenant="*", role="admin"),
                                      FakeContext())
    parsed = tokens.parse_token(reply.token)
    assert parsed is not None and parsed[0] == reply.token_id
    assert replica.node.state.tokens[reply.token_id].digest == tokens.secret_digest(parsed[1])
