"""Integration (issue 26): task data on a real cluster of three replicas and a subprocess agent
(as root in CI its tasks run as the agent's task user). A map-reduce job whose answer is checked:
`ls` outputs a list, `measure` expands into one instance per item (one instance fails its first
attempt and is retried), `total` reads every instance's outputs from $RAFTSCHED_INPUTS and its
template; `raftsched task outputs` shows the answer. A task that leaves an output over 64 KiB
fails saying so, and a bad template is refused at submit, naming task and field, creating
nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster, running, task_user_root
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AGENT = "data"
JOB_TIMEOUT_S = 90.0
PYTHON = "/usr/bin/python3"  # the task user reaches the system's python, not the test's venv

LS = 'import json, os; json.dump({"files": ["alpha", "be", "gamma", "de"]}, ' \
     'open(os.environ["RAFTSCHED_OUTPUT"], "w"))'
MEASURE = (  # instance 1 fails its first attempt: the retry is per instance
    'import json, os, sys\n'
    'if os.environ["INDEX"] == "1" and os.environ["RAFTSCHED_ATTEMPT"] == "1": sys.exit(3)\n'
    'json.dump({"n": len(os.environ["ITEM"])}, open(os.environ["RAFTSCHED_OUTPUT"], "w"))\n')
TOTAL = (
    'import json, os, sys\n'
    'inputs = json.load(open(os.environ["RAFTSCHED_INPUTS"]))\n'
    'total = sum(out["n"] for out in inputs["measure"])\n'
    'json.dump({"total": total, "first": int(sys.argv[1]), "count": len(inputs["measure"])},\n'
    '          open(os.environ["RAFTSCHED_OUTPUT"], "w"))\n')
MAP_REDUCE = {
    "name": "map-reduce", "idempotency_key": "map-reduce-1",
    "tasks": [
        {"id": "ls", "command": [PYTHON, "-c", LS]},
        {"id": "measure", "depends_on": ["ls"], "for_each": "{{ tasks.ls.outputs.files }}",
         "command": [PYTHON, "-c", MEASURE], "env": {"ITEM": "{{ item }}", "INDEX": "{{ index }}"},
         "retry": {"max_attempts": 2, "backoff_s": 0}},
        {"id": "total", "depends_on": ["measure"],
         "command": [PYTHON, "-c", TOTAL, "{{ tasks.measure.outputs.0.n }}"]},
    ],
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with task_user_root("raftsched-data-") as root, running(root) as local:
        local.add_agent(AGENT, cpu=4, executor="subprocess")
        local.wait_clusters_ready(AGENT)
        yield local


def _finished(cluster: LocalCluster, job_id: str) -> str:
    client = cluster.client()

    def terminal() -> str | None:
        state = client.get_job(job_id).state
        return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    return wait_until(terminal, f"job {job_id} to end", JOB_TIMEOUT_S)


def test_a_map_reduce_job_hands_data_down_and_its_answer_is_right(cluster: LocalCluster,
                                                                 tmp_path: object) -> None:
    spec = tmp_path / "map-reduce.json"  # type: ignore[operator]
    spec.write_text(json.dumps(MAP_REDUCE))
    submitted = cluster.cli("submit", "--json", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    assert _finished(cluster, job_id) == "SUCCEEDED", cluster.cli("job", "tasks", job_id).stdout

    answer = cluster.cli("task", "outputs", job_id, "total", "--json")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == {"job_id": job_id, "task_id": "total",
                                         "outputs": {"total": 5 + 2 + 5 + 2, "first": 5,
                                                     "count": 4}}
    text = cluster.cli("task", "outputs", job_id, "measure[2]")
    assert json.loads(text.stdout) == {"n": 5}
    mapped = cluster.cli("task", "outputs", job_id, "measure", "--json")
    assert json.loads(mapped.stdout)["outputs"] == [{"n": 5}, {"n": 2}, {"n": 5}, {"n": 2}]

    history = json.loads(cluster.cli("task", "history", job_id, "measure[1]", "--json").stdout)
    assert [a["state"] for a in history["attempts"]] == ["FAILED", "SUCCEEDED"]
    assert history["attempts"][1]["outputs"] == {"n": 2}
    tasks = json.loads(cluster.cli("job", "tasks", job_id, "--json").stdout)
    print(json.dumps(tasks, indent=1)[:2000])
    ids = [task["task_id"] for task in tasks]
    assert ids == ["ls", "measure", "measure[0]", "measure[1]", "measure[2]", "measure[3]",
                   "total"]  # the instances grouped under their task
    assert tasks[1]["instances"] == 4 and tasks[2]["instance_of"] == "measure"
    status = json.loads(cluster.cli("job", "status", job_id, "--json").stdout)
    assert status["for_each"] == [{"task_id": "measure", "instances": 4,
                                   "tasks": {"SUCCEEDED": 4}}]
    assert status["total_tasks"] == 7
    text = cluster.cli("job", "status", job_id).stdout
    assert "  measure  4 instances: SUCCEEDED 4" in text, text
    table = cluster.cli("job", "tasks", job_id).stdout
    print(table)
    assert "measure (for_each: 4)" in table and "\n  measure[3] " in table


def test_the_map_reduce_example_runs_and_sums_its_words(cluster: LocalCluster) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "map-reduce.yaml"
    submitted = cluster.cli("submit", "--json", str(example))
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    assert _finished(cluster, job_id) == "SUCCEEDED", cluster.cli("job", "tasks", job_id).stdout
    answer = json.loads(cluster.cli("task", "outputs", job_id, "total", "--json").stdout)
    assert answer["outputs"] == {"total": 4 + 5 + 5 + 6, "first": "raft"}


def test_an_output_over_64_kib_fails_its_attempt_saying_so(cluster: LocalCluster) -> None:
    big = ('import os; open(os.environ["RAFTSCHED_OUTPUT"], "w").write('
           '\'{"blob": "\' + "x" * 70000 + \'"}\')')
    client = cluster.client()
    job_id = client.submit(json.dumps({"name": "too-big", "tasks": [
        {"id": "big", "command": [PYTHON, "-c", big]}]})).job_id
    assert _finished(cluster, job_id) == "FAILED"
    history = json.loads(cluster.cli("task", "history", job_id, "big", "--json").stdout)
    [attempt] = history["attempts"]
    assert attempt["exit_code"] == 0 and attempt["state"] == "FAILED"
    assert "over the 65536-byte bound" in attempt["reason"], attempt
    refused = cluster.cli("task", "outputs", job_id, "big")
    assert refused.returncode == 2 and "is FAILED: only a SUCCEEDED task has outputs" \
        in refused.stderr, refused.stderr


def test_a_bad_template_is_refused_at_submit_naming_task_and_field(cluster: LocalCluster,
                                                                   tmp_path: object) -> None:
    spec = tmp_path / "bad.yaml"  # type: ignore[operator]
    spec.write_text("name: bad-template\ntasks:\n  - {id: a, command: [\"true\"]}\n"
                    "  - {id: b, command: [echo, \"{{ tasks.a.outputs.n }}\"]}\n")
    before = len(cluster.client().list_jobs().jobs)
    refused = cluster.cli("submit", str(spec))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "tasks[1] (b).command[1]: {{ tasks.a.outputs... }} names 'a', which is not upstream " \
           "of this task: add it to depends_on" in refused.stderr, refused.stderr
    assert len(cluster.client().list_jobs().jobs) == before
