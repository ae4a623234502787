"""Job parameters on a real cluster: `submit --param` sends the values, `job status --json`
shows them; the same idempotency key with another value is the "different spec" conflict; an
unknown --param (CLI) or params entry (gRPC) is refused and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.errors import Code, RaftschedError
from tests.support.cluster import running

pytestmark = pytest.mark.integration

SPEC = """\
name: daily
idempotency_key: daily-run
allow_unschedulable: true
params: {date: null, region: eu}
tasks:
  - {id: a, command: [mock]}
"""


def test_params_travel_with_the_job_and_are_part_of_its_identity(tmp_path: Path) -> None:
    spec = tmp_path / "daily.yaml"
    spec.write_text(SPEC)
    with running(tmp_path / "cluster") as cluster:
        first = cluster.cli("submit", str(spec), "--param", "date=2026-12-05", "--json")
        assert first.returncode == 0, first.stdout + first.stderr
        job_id = json.loads(first.stdout)["job_id"]
        status = cluster.cli("job", "status", job_id, "--json")
        assert json.loads(status.stdout)["params"] == {"date": "2026-12-05", "region": "eu"}
        text = cluster.cli("job", "status", job_id).stdout
        assert any(line.split() == ["param", "date", "2026-12-05"] for line in text.splitlines()), \
            text

        again = cluster.cli("submit", str(spec), "--param", "date=2026-12-05", "--json")
        assert json.loads(again.stdout) == {"job_id": job_id, "created": False,
                                            "idempotency_key": "daily-run"}
        other = cluster.cli("submit", str(spec), "--param", "date=2026-12-06")
        assert other.returncode == 2, other.stdout + other.stderr
        assert "ALREADY_EXISTS" in other.stderr and "different spec" in other.stderr, other.stderr

        unknown = cluster.cli("submit", str(spec), "--param", "date=d", "--param", "nope=1")
        assert (unknown.returncode, unknown.stdout) == (2, "")
        assert "--param nope: the job has no param 'nope' (it has: date, region)" in \
            unknown.stderr

        client = cluster.client()
        with pytest.raises(RaftschedError) as refused:
            client._call(pb_grpc.SchedulerStub, "SubmitJob", pb.SubmitJobRequest(
                spec=SPEC, idempotency_key="grpc-key", params={"date": "d", "nope": "1"}), 30.0)
        assert refused.value.code == Code.INVALID_ARGUMENT
        assert "--param nope: the job has no param 'nope'" in refused.value.message
        jobs = cluster.cli("job", "list", "--json")
        assert [j["job_id"] for j in json.loads(jobs.stdout)["jobs"]] == [job_id]

        made = client._call(pb_grpc.SchedulerStub, "SubmitJob", pb.SubmitJobRequest(
            spec=SPEC, idempotency_key="grpc-key", params={"date": "x"}), 30.0)
        assert dict(client.get_job(made.job_id).params) == {"date": "x", "region": "eu"}
