"""Named custom resources with real processes: an agent advertising `--resources fpga=1`, a job
of two tasks each needing one FPGA (they run there, one after the other, never on the cluster
without FPGAs), a task needing more FPGAs than any cluster has (refused at submit, naming the
shortfall), and `admin status` showing what is offered and held."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

DONE_TIMEOUT_S = 60.0
TWO = """\
name: two-fpga-tasks
tasks:
  - {id: a, command: [mock, sleep_ms=300], resources: {cpu: 1, custom: {fpga: 1}}}
  - {id: b, command: [mock, sleep_ms=300], resources: {cpu: 1, custom: {fpga: 1}}}
"""
TOO_MANY = """\
name: too-many
tasks:
  - {id: big, command: [mock], resources: {custom: {fpga: 2}}}
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running(tmp_path) as local:
        local.add_agent("fpga-box", extra=("--resources", "fpga=1"))
        local.add_agent("plain", cpu=8)
        local.wait_clusters_ready("fpga-box", "plain")
        yield local


def test_tasks_needing_a_custom_resource_share_what_the_cluster_offers(
        cluster: LocalCluster, tmp_path: Path) -> None:
    client = cluster.client()
    status = json.loads(cluster.cli("admin", "status", "--json").stdout)
    box = {c["cluster"]: c for c in status["clusters"]}["fpga-box"]
    assert box["custom"] == {"fpga": 1} and box["custom_reserved"] == {}

    job_id = client.submit(TWO).job_id
    wait_until(lambda: client.get_job(job_id).state == "SUCCEEDED" or None,
               "both FPGA tasks to finish", DONE_TIMEOUT_S)
    history = {t: client.task_history(job_id, t) for t in ("a", "b")}
    assert {h.attempts[-1].cluster for h in history.values()} == {"fpga-box"}
    first, second = sorted(history.values(), key=lambda h: h.attempts[-1].started_ms)
    # One FPGA: the second started only after the first had finished.
    assert second.attempts[-1].assigned_ms >= first.attempts[-1].finished_ms

    spec = tmp_path / "too-many.yaml"
    spec.write_text(TOO_MANY)
    refused = cluster.cli("submit", str(spec))
    assert (refused.returncode, refused.stdout) == (2, ""), refused.stdout + refused.stderr
    assert "custom {'fpga': 2}" in refused.stderr
    assert "has custom fpga 1 of 2 (short by 1)" in refused.stderr
