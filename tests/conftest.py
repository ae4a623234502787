"""Suite-wide configuration: which test files share a named resource of the machine and must
therefore run in one pytest-xdist worker, one after another, and which must not run in a worker
at all (`scripts/test` runs the `serial` ones in one plain process, then the others with
`-n 2 --dist loadgroup`; a plain `pytest` run, without `-n`, runs everything in one process).

Everything else is private to its test: ports are ephemeral, data in a temp dir, and an agent's
cgroup is `raftsched-agent/CLUSTER-DIGEST` where the digest is of its attempts dir (a temp dir),
so two workers' agents never share one."""

from __future__ import annotations

import pytest

SERIAL = (
    # Real task processes of the subprocess executor (as nobody or the base accounts games,
    # bin, ...; cgroups of fixed names "probe" and "sweep-test"). In a pytest-xdist worker
    # test_executor.py's SIGKILL escalation (a 200 ms timeout against a shell's `trap '' TERM`)
    # and test_tenant_users.py's two tenants at once failed repeatedly, also with -n 1 and
    # this group alone; in one plain process they pass: marked `serial`, run outside xdist.
    "tests/unit/agent/test_executor.py",
    "tests/unit/agent/test_tenant_users.py",
    "tests/unit/agent/test_containment.py",
    "tests/integration/test_attempt_containment.py",
    "tests/integration/test_agent_main.py",
    "tests/integration/test_tenant_task_users.py",
    "tests/integration/test_task_isolation.py",
)
"""Test files marked `serial`: scripts/test runs them first, in one plain pytest process."""

SHARED_RESOURCES = {
    "slurm": (
        # the machine's Slurm and munge binaries, their daemons started per test
        "tests/integration/test_dev_slurm.py",
        "tests/integration/test_slurm_executor.py",
        "tests/integration/test_slurm_fixture.py",
        "tests/unit/dev/test_slurm.py",
        "tests/unit/dev/test_cluster.py",
    ),
    "jepsen": (
        # network namespaces, iptables rules and the harness's nodes: one run at a time
        "tests/jepsen/test_run.py",
    ),
}
"""xdist group name → the test files (paths from the repository root) that belong to it."""

_GROUP_OF = {path: group for group, paths in SHARED_RESOURCES.items() for path in paths}


def pytest_configure(config: pytest.Config) -> None:
    missing = sorted(path for path in [*_GROUP_OF, *SERIAL]
                     if not (config.rootpath / path).is_file())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py names missing test files: {missing}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            path = item.path.relative_to(config.rootpath).as_posix()
        except ValueError:
            continue
        if (group := _GROUP_OF.get(path)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if path in SERIAL:
            item.add_marker(pytest.mark.serial)
