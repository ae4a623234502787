"""`Client.submit(..., params=)` and `submit_jobs(..., params=)` apply the values locally and
send the wire form with them (the replicas see no separate params)."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Client
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import SpecError
from raftsched.spec.wire import decode_wire

SPEC = "name: p\nparams: {date: null, n: 1}\ntasks:\n- {id: a, command: [x]}\n"


class Sent(Client):
    def __init__(self) -> None:
        super().__init__(["127.0.0.1:1"])
        self.requests: list[Any] = []

    def _call(self, stub: Any, method: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.requests.append(request)
        if method == "SubmitJobs":
            return pb.SubmitJobsResponse(answers=[pb.SubmitJobsAnswer(job_id="j", created=True)
                                                  for _ in request.jobs])
        return pb.SubmitJobResponse(job_id="j", created=True)


def test_submit_applies_params_before_packing() -> None:
    client = Sent()
    client.submit(SPEC, "k", params={"date": "d"})
    [request] = client.requests
    assert decode_wire(request.spec_wire).params == (("date", "d"), ("n", "1"))
    assert dict(request.params) == {}


def test_submit_jobs_applies_params_to_each_spec() -> None:
    client = Sent()
    spec = parse_spec_text(SPEC, params={"date": "x"})
    client.submit_jobs([spec, spec], params={"n": "7"})
    [request] = client.requests
    assert [decode_wire(item.spec_wire).params for item in request.jobs] == \
        [(("date", "x"), ("n", "7"))] * 2


def test_an_unknown_param_is_refused_before_sending() -> None:
    client = Sent()
    with pytest.raises(SpecError, match="--param nope: the job has no param 'nope'"):
        client.submit(SPEC, params={"date": "d", "nope": "1"})
    with pytest.raises(SpecError, match=r"params\.date: required"):
        client.submit(SPEC)
    assert client.requests == []
