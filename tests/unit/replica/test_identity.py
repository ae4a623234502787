"""Caller checks (raftsched.replica.identity) that need no server: the agent rule."""

from __future__ import annotations

import grpc
import pytest

from raftsched import tls
from raftsched.api import raftsched_pb2 as pb
from raftsched.replica import identity

AGENT = f"{tls.AGENT_PREFIX}east"


def test_check_agent_admits_the_agent_of_the_cluster_the_request_names() -> None:
    identity.check_agent(AGENT, pb.HeartbeatRequest(cluster_id="east"))


@pytest.mark.parametrize("caller", [f"{tls.USER_PREFIX}alice", f"{tls.AGENT_PREFIX}west"])
def test_check_agent_refuses_another_caller(caller: str) -> None:
    with pytest.raises(identity.Refused) as caught:
        identity.check_agent(caller, pb.HeartbeatRequest(cluster_id="east"))
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_check_agent_shows_a_long_cluster_id_truncated() -> None:
    """Found by tests/integration/test_fuzz_rpc.py: a 256 KiB cluster_id was echoed whole, and
    the client saw RESOURCE_EXHAUSTED (metadata over its limit) instead of PERMISSION_DENIED."""
    with pytest.raises(identity.Refused) as caught:
        identity.check_agent(AGENT, pb.HeartbeatRequest(cluster_id="x" * 262_145))
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert len(caught.value.message) <= 200 and "'east'" in caught.value.message
