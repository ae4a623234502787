"""`rpc.RequestGuard` on an in-process gRPC server on 127.0.0.1: for each of the four method
shapes, bytes that are not the method's message are answered INVALID_ARGUMENT "request is not a
valid <message>", marked as answered by the replica, and no servicer sees a request; valid
requests go through; a service the guard was not given is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from raftsched import rpc
from raftsched.api import raftsched_pb2 as pb

CALL_TIMEOUT_S = 10.0
REPLICA = "10.0.0.1:50051"
MESSAGE = pb.GetJobRequest
SHAPES = {
    # method name: (request streaming, response streaming, handler factory)
    "UnaryUnary": (False, False, grpc.unary_unary_rpc_method_handler),
    "UnaryStream": (False, True, grpc.unary_stream_rpc_method_handler),
    "StreamUnary": (True, False, grpc.stream_unary_rpc_method_handler),
    "StreamStream": (True, True, grpc.stream_stream_rpc_method_handler),
}
GUARDED = SimpleNamespace(full_name="test.Guarded", methods=[
    SimpleNamespace(name=name, input_type=MESSAGE.DESCRIPTOR) for name in SHAPES])
"""Stands in for a protobuf ServiceDescriptor (what the guard reads of one)."""


class Echo:
    """Every shape answers the job ids it received, in one message or one per request."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def take(self, request: Any) -> Any:
        assert isinstance(request, MESSAGE), request
        self.seen.append(request.job_id)
        return request

    def behaviour(self, name: str) -> Any:
        streaming_in, streaming_out, _ = SHAPES[name]

        def unary_in(request: Any, context: grpc.ServicerContext) -> Any:
            answer = self.take(request)
            return iter([answer]) if streaming_out else answer

        def stream_in(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            answers = [self.take(request) for request in requests]
            return iter(answers) if streaming_out else MESSAGE(
                job_id=",".join(a.job_id for a in answers))

        return stream_in if streaming_in else unary_in


def handlers(echo: Echo, service: str) -> Any:
    return grpc.method_handlers_generic_handler(service, {
        name: factory(echo.behaviour(name), request_deserializer=MESSAGE.FromString,
                      response_serializer=MESSAGE.SerializeToString)
        for name, (_, _, factory) in SHAPES.items()})


@pytest.fixture
def served() -> Iterator[tuple[grpc.Channel, Echo]]:
    echo = Echo()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[rpc.RequestGuard([GUARDED], replica=REPLICA)])
    server.add_generic_rpc_handlers((handlers(echo, "test.Guarded"),
                                     handlers(echo, "test.Unguarded")))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, echo
    finally:
        server.stop(grace=CALL_TIMEOUT_S).wait(CALL_TIMEOUT_S)


def call(channel: grpc.Channel, service: str, name: str, payloads: list[bytes]) -> list[bytes]:
    """Send `payloads` as raw request bytes (one for a unary request); the answers' bytes."""
    streaming_in, streaming_out, _ = SHAPES[name]
    factory = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
               (True, False): channel.stream_unary, (True, True): channel.stream_stream}
    stub = factory[(streaming_in, streaming_out)](f"/{service}/{name}")
    answer = stub(iter(payloads) if streaming_in else payloads[0], timeout=CALL_TIMEOUT_S)
    return list(answer) if streaming_out else [answer]


@pytest.mark.parametrize("name", SHAPES)
def test_undecodable_bytes_are_invalid_argument_and_reach_no_servicer(
    served: tuple[grpc.Channel, Echo], name: str
) -> None:
    channel, echo = served
    with pytest.raises(grpc.RpcError) as caught:
        call(channel, "test.Guarded", name, [b"\xff\xff\xff"])
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "request is not a valid raftsched.v1.GetJobRequest"
    assert dict(error.trailing_metadata())[rpc.REPLICA_METADATA_KEY] == REPLICA
    assert echo.seen == []


@pytest.mark.parametrize("name", ["StreamUnary", "StreamStream"])
def test_a_stream_stops_at_its_first_undecodable_request(
    served: tuple[grpc.Channel, Echo], name: str
) -> None:
    channel, echo = served
    with pytest.raises(grpc.RpcError) as caught:
        call(channel, "test.Guarded", name,
             [MESSAGE(job_id="j1").SerializeToString(), b"\xff\xff\xff",
              MESSAGE(job_id="j3").SerializeToString()])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert echo.seen == ["j1"]


@pytest.mark.parametrize("name", SHAPES)
def test_valid_requests_go_through_every_time(served: tuple[grpc.Channel, Echo],
                                              name: str) -> None:
    channel, echo = served
    for attempt in range(3):  # the second and third calls use the cached guarded handler
        answers = call(channel, "test.Guarded", name,
                       [MESSAGE(job_id=f"j{attempt}").SerializeToString()])
        assert [MESSAGE.FromString(a).job_id for a in answers] == [f"j{attempt}"]
    assert echo.seen == ["j0", "j1", "j2"]


def test_a_service_the_guard_was_not_given_is_left_alone(
    served: tuple[grpc.Channel, Echo]
) -> None:
    channel, _ = served
    with pytest.raises(grpc.RpcError) as caught:
        call(channel, "test.Unguarded", "UnaryUnary", [b"\xff\xff\xff"])
    assert caught.value.code() == grpc.StatusCode.INTERNAL  # gRPC's own answer
