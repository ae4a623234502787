"""agent.containment: where the cgroup v2 hierarchy is, which cgroup this process is in, and
what an attempt's spec says of its containment."""

from __future__ import annotations

from pathlib import Path

from agent import containment

MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/uni\\040fied cgroup2 rw,relatime 0 0
"""


def test_the_cgroup2_mount_is_found_among_v1_ones_and_unescaped() -> None:
    assert containment.cgroup2_mount(MOUNTS) == Path("/sys/fs/cgroup/uni fied")
    assert containment.cgroup2_mount("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n") is None


def test_the_own_cgroup_is_the_unified_line() -> None:
    text = "9:name=systemd:/\n4:memory:/x/y\n0::/system.slice/agent.service\n"
    assert containment.own_cgroup(text) == "/system.slice/agent.service"
    assert containment.own_cgroup("0::/\n") == "/"
    assert containment.own_cgroup("4:memory:/x\n") is None


def test_an_attempt_spec_names_its_cgroup_or_the_session_fallback() -> None:
    parent = Path("/cg/raftsched-agent/east-0123")
    cgroup = containment.Containment(containment.MODE_CGROUP, parent)
    assert cgroup.for_attempt(7) == {"mode": "cgroup", "cgroup": f"{parent}/{7:020d}"}
    assert containment.session_mode("why").for_attempt(7) == {"mode": "session"}
    env = {"RAFTSCHED_JOB_ID": "j", "RAFTSCHED_TASK_ID": "t", "RAFTSCHED_FENCE": "7", "X": "y"}
    attempt = containment.AttemptContainment.from_spec(
        {"env": env, "user": [65534, 65534], "containment": cgroup.for_attempt(7)})
    assert attempt.cgroup == parent / f"{7:020d}" and attempt.uid == 65534
    assert attempt.markers == (b"RAFTSCHED_JOB_ID=j", b"RAFTSCHED_TASK_ID=t",
                               b"RAFTSCHED_FENCE=7")
    older = containment.AttemptContainment.from_spec({"env": env, "user": None})
    assert older.cgroup is None  # a spec written before containment: the session fallback


def test_session_mode_is_chosen_when_asked_for() -> None:
    chosen = containment.choose(containment.MODE_SESSION, "east", Path("/nonexistent"))
    assert (chosen.mode, chosen.parent) == ("session", None)
