"""The checked-in generated gRPC code is exactly what scripts/gen-proto makes from the proto."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import paths

ROOT = paths.REPO
GENERATED = ("raftsched_pb2.py", "raftsched_pb2.pyi", "raftsched_pb2_grpc.py")


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/gen-proto")
    subprocess.run(["bash", str(ROOT / "scripts" / "gen-proto"), str(tmp_path)], check=True,
                   capture_output=True, timeout=120)
    for name in GENERATED:
        fresh = (tmp_path / name).read_text()
        checked_in = (ROOT / "raftsched" / "api" / name).read_text()
        assert fresh == checked_in, f"raftsched/api/{name} is stale: run scripts/gen-proto"


def test_services_are_importable_and_complete() -> None:
    from raftsched.api import raftsched_pb2 as pb

    services = {name: [m.name for m in s.methods] for name, s in
                pb.DESCRIPTOR.services_by_name.items()}
    assert services == {
        "Scheduler": ["SubmitJob", "GetJob", "ListJobs", "ListTasks", "CancelJob",
                      "GetTaskHistory", "WatchJob", "ExplainTask", "TaskLogs", "WatchEvents",
                      "SubmitJobs", "GetTopology"],
        "AgentGateway": ["Register", "Heartbeat", "Report", "SendLog"],
        "Admin": ["ClusterStatus", "AddReplica", "RemoveReplica", "CreateToken", "RevokeToken",
                  "ListTokens", "RemoveCluster", "DrainCluster", "SetTenant", "ListTenants",
                  "SaveSnapshot", "RevokeCertificate", "ListRevokedCertificates", "SetShardMap",
                  "ExportShardKeys", "ImportShardKeys"],
        "Schedules": ["CreateSchedule", "ListSchedules", "GetSchedule", "SetSchedule",
                      "TriggerSchedule", "BackfillSchedule", "DeleteSchedule"],
    }
