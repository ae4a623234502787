"""Suite-wide configuration: which test files share a named resource of the machine and must
therefore run in one pytest-xdist worker, one after another (`scripts/test` runs the suite with
`-n 2 --dist loadgroup`; a plain `pytest` run, without `-n`, ignores the groups).

Everything else is private to its test: ports are ephemeral, data in a temp dir, and an agent's
cgroup is `raftsched-agent/CLUSTER-DIGEST` where the digest is of its attempts dir (a temp dir),
so two workers' agents never share one."""

from __future__ import annotations

import pytest

SHARED_RESOURCES = {
    "cgroup-fixed-names": (
        # cgroups of fixed names under raftsched-agent/ (the "probe" and "sweep-test" agents),
        # made and removed by the tests themselves
        "tests/integration/test_attempt_containment.py",
        "tests/unit/agent/test_containment.py",
        "tests/unit/agent/test_executor.py",
        "tests/integration/test_agent_main.py",
    ),
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
    missing = sorted(path for path in _GROUP_OF if not (config.rootpath / path).is_file())
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
