"""Integration (issue 24 item 3): `raftsched submit DIR` on a real cluster of three over mutual
TLS sends one SubmitJobs batch: the good files become jobs, a file with problems (found by the
CLI) and a job apply refuses (no cluster could take it) are each named with their file, nothing
of them is created, and a resubmit of the same directory creates nothing new."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, running

pytestmark = pytest.mark.integration

GOOD_A = ("name: batch-a\nidempotency_key: ka\nallow_unschedulable: true\ntasks:\n"
          "  - {id: one, command: [\"true\"]}\n  - {id: two, command: [\"true\"], "
          "depends_on: [one]}\n")
GOOD_B = json.dumps({"name": "batch-b", "idempotency_key": "kb", "allow_unschedulable": True,
                     "tasks": [{"id": "solo", "command": ["true"]}]})
BAD_LOCAL = ("name: batch-c\ntasks:\n  - {id: x, command: [\"true\"], depends_on: [ghost]}\n")
BAD_AT_APPLY = ("name: batch-d\nidempotency_key: kd\ntasks:\n"
                "  - {id: y, command: [\"true\"]}\n")
"""No cluster is registered and the job does not allow_unschedulable: JOB_SUBMIT refuses it."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running(tmp_path_factory.mktemp("submit-batch")) as local:
        yield local


def test_a_directory_is_one_batch_with_an_answer_per_file(cluster: LocalCluster,
                                                          tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    for name, text in (("a.yaml", GOOD_A), ("b.json", GOOD_B), ("c.yaml", BAD_LOCAL),
                       ("d.yml", BAD_AT_APPLY), ("notes.txt", "not a spec")):
        (specs / name).write_text(text)
    first = cluster.cli("submit", "--json", str(specs))
    assert first.returncode == 2 and "Traceback" not in first.stderr, first.stderr
    documents = json.loads(first.stdout)
    print("answers:", documents)
    assert [d["file"] for d in documents] == [str(specs / n) for n in
                                              ("a.yaml", "b.json", "c.yaml", "d.yml")]
    assert documents[0]["created"] is True and documents[1]["created"] is True
    assert documents[2]["error"]["code"] == "INVALID_ARGUMENT"
    assert "unknown dependency 'ghost'" in documents[2]["error"]["message"]
    assert documents[3]["error"]["code"] == "FAILED_PRECONDITION"
    assert documents[3]["error"]["message"].startswith(f"jobs[2] (file {specs / 'd.yml'}) task y ")
    client = cluster.client()
    jobs = {job.name: job for job in client.list_jobs().jobs}
    assert sorted(jobs) == ["batch-a", "batch-b"]  # nothing of c or d
    assert jobs["batch-a"].job_id == documents[0]["job_id"]
    assert [t.task_id for t in client.list_tasks(documents[0]["job_id"]).tasks] == ["one", "two"]

    again = cluster.cli("submit", str(specs))
    assert again.returncode == 2, again.stderr
    lines = again.stdout.splitlines()
    print("again:", lines)
    assert lines[0] == (f"{specs / 'a.yaml'}: submitted job {documents[0]['job_id']} "
                        "(already existed)")
    assert lines[1] == (f"{specs / 'b.json'}: submitted job {documents[1]['job_id']} "
                        "(already existed)")
    assert lines[2].startswith(f"{specs / 'c.yaml'}: refused: INVALID_ARGUMENT: ")
    assert lines[3].startswith(f"{specs / 'd.yml'}: refused: FAILED_PRECONDITION: task y needs ")
    assert sorted(job.name for job in client.list_jobs().jobs) == ["batch-a", "batch-b"]
