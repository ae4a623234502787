"""raftsched.dev.slurm without a Slurm: the slurm.conf it writes, the environment of its client
commands, why it cannot run, which processes count as its jobs', and the order it stops its
daemons in (stand-in `sleep`s). The real thing: tests/integration/test_slurm_fixture.py and
test_dev_slurm.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftsched.dev import slurm as private_slurm
from raftsched.dev import supervisor as sv


def start(children: list[sv.Child], name: str, tmp_path: Path,
          env: dict[str, str] | None = None) -> sv.Child:
    child = sv.Child(name, ["sleep", "60"], tmp_path / f"{name}.log",
                     env={**os.environ, **(env or {})})
    child.start()
    children.append(child)
    return child


def test_the_slurm_conf_keeps_everything_under_the_directory(tmp_path: Path) -> None:
    slurm = private_slurm.LocalSlurm(tmp_path / "s", cpus=4, memory_mb=8192,
                                     features=("linux", "fast"))
    slurm.ctld_port, slurm.slurmd_port = 7001, 7002
    lines = slurm.slurm_conf().splitlines()
    node = next(line for line in lines if line.startswith("NodeName="))
    assert node == (f"NodeName={slurm.node} NodeAddr=127.0.0.1 CPUs=4 RealMemory=8192 "
                    "Features=linux,fast State=UNKNOWN")
    assert f"StateSaveLocation={tmp_path / 's' / 'state'}" in lines
    assert f"JobCompLoc={tmp_path / 's' / 'jobcomp.txt'}" in lines
    assert {"SlurmctldPort=7001", "SlurmdPort=7002", "JobCompType=jobcomp/filetxt"} <= set(lines)
    assert any(line.startswith(f"PartitionName={private_slurm.PARTITION} ") for line in lines)
    plain = private_slurm.LocalSlurm(tmp_path / "p").slurm_conf()
    assert "Features=" not in plain and "CPUs=8 RealMemory=8000 State=UNKNOWN" in plain


def test_client_commands_see_only_this_clusters_conf(tmp_path: Path) -> None:
    env = private_slurm.client_env(tmp_path / "slurm.conf", {
        "PATH": "/bin", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JOB_ID": "3",
        "SBATCH_PARTITION": "x", "SQUEUE_FORMAT": "%i"})
    assert env == {"PATH": "/bin", "SLURM_CONF": str(tmp_path / "slurm.conf")}


def test_why_a_private_slurm_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private_slurm, "binary", lambda name: None if name in (
        "slurmd", "munged") else f"/usr/bin/{name}")
    reason = private_slurm.slurm_available()
    assert reason is not None and "\n" not in reason
    assert reason.startswith("Slurm not installed (missing munged, slurmd): install the Debian "
                             "packages slurm-wlm and munge as root")
    assert "ensure_slurm" in reason and "scripts/demo --slurm" in reason
    monkeypatch.setattr(private_slurm, "binary", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert private_slurm.slurm_available() == (
        "a private Slurm needs root (SlurmUser=root, slurmd runs jobs as the submitting user): "
        "run it as root")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert private_slurm.slurm_available() is None
    with pytest.raises(private_slurm.SlurmError) as caught:
        monkeypatch.setattr(private_slurm, "slurm_available", lambda: "no Slurm here")
        private_slurm.LocalSlurm(Path("/nonexistent")).start()
    assert caught.value.message == str(caught.value) == "no Slurm here"


def test_job_processes_are_those_of_its_jobs_not_its_daemons_or_a_shell(
        children: list[sv.Child], tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    daemon = start(children, "slurmd", tmp_path, {"SLURM_CONF": str(conf)})
    shell = start(children, "shell", tmp_path, {"SLURM_CONF": str(conf)})
    job = start(children, "job", tmp_path, {"SLURM_CONF": str(conf), "SLURM_JOB_ID": "7"})
    other = start(children, "other", tmp_path, {"SLURM_CONF": "/else/slurm.conf",
                                                "SLURM_JOB_ID": "7"})
    found = private_slurm.job_processes(conf, {daemon.pid})
    assert job.pid in found and not {daemon.pid, shell.pid, other.pid} & set(found)
    assert private_slurm.wait_job_processes(conf, 0.2, {daemon.pid}) == [job.pid]
    job.kill()
    assert private_slurm.wait_job_processes(conf, 5.0, {daemon.pid}) == []


def test_the_daemons_stop_slurmd_first_and_jobs_are_cancelled_only_with_a_controller(
        children: list[sv.Child], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cancelled: list[Path] = []
    monkeypatch.setattr(private_slurm, "cancel_jobs", lambda env, cwd: cancelled.append(cwd))
    conf = tmp_path / "slurm.conf"
    daemons = {name: start(children, name, tmp_path) for name in ("munged", "slurmd")}
    stopped = private_slurm.stop_daemons(daemons, conf)
    assert [(r.name, r.outcome) for r in stopped.results] == [("slurmd", "stopped"),
                                                              ("munged", "stopped")]
    assert stopped.job_processes == [] and cancelled == []  # no controller: nothing to ask
    daemons = {name: start(children, name, tmp_path) for name in private_slurm.DAEMONS}
    recorded = {name: child.recorded() for name, child in daemons.items()}
    stopped = private_slurm.stop_daemons(recorded, conf)
    assert [r.name for r in stopped.results] == ["slurmd", "slurmctld", "munged"]
    assert cancelled == [tmp_path] and not any(d.alive() for d in daemons.values())
    again = private_slurm.stop_daemons(recorded, conf)
    assert [r.outcome for r in again.results] == [sv.StopOutcome.NOT_RUNNING] * 3
