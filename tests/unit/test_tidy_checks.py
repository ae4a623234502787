"""The house's checks can fail: the tidy test's citation and length checks, and import-linter's
layer contracts, each shown catching a planted defect (issue 23's tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit import test_tidy as tidy

LINT_IMPORTS_TIMEOUT_S = 120.0


def test_the_citation_check_catches_a_stale_path_a_stale_module_and_design_md() -> None:
    # Built at run time: the tidy test reads this file too, and must not see them.
    stale_path, stale_module = "raftsched/state/" + "no_such_module.py", "raftsched." + "raft_node"
    design = "DESIGN" + ".md"
    text = ("See `raftsched/state/fsm.py` and raftsched.state.queries (both true), then "
            f"`{stale_path}`, {stale_module}.RaftNode and ../{design}.")
    problems = set(tidy.citation_problems(text))
    assert problems == {
        f"path `{stale_path}` does not exist",
        f"module `{stale_module}` does not exist",
        f"cites {design}, which is not in the repository (cite docs/architecture.md)",
    }


def test_the_length_check_catches_a_71_line_function(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "raftsched"
    package.mkdir()
    lines = [f"    x{i} = {i}\n" for i in range(tidy.MAX_FUNCTION_LINES)]
    (package / "planted.py").write_text("def planted() -> None:\n" + "".join(lines))
    (package / "short.py").write_text("def short() -> None:\n" + "".join(lines[1:]))
    (tmp_path / "agent").mkdir()
    monkeypatch.setattr(tidy, "ROOT", tmp_path)
    monkeypatch.setattr(tidy, "LONG_FUNCTIONS", {})
    assert tidy.product_function_lengths() == {"raftsched.planted.planted": 71,
                                               "raftsched.short.short": 70}
    with pytest.raises(AssertionError, match=r"raftsched\.planted\.planted', 71"):
        tidy.test_no_new_product_function_over_the_line_limit()


def test_import_linter_catches_raft_importing_the_replica(tmp_path: Path) -> None:
    """A copy of the tree with `replica/raft/journal.py` importing `replica.identity` (above
    it): lint-imports exits non-zero naming the contract and the import."""
    for name in ("raftsched", "agent"):
        shutil.copytree(tidy.ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(tidy.ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    journal = tmp_path / "raftsched/replica/raft/journal.py"
    planted = "\nfrom raftsched.replica import identity  # planted\n"
    journal.write_text(journal.read_text() + planted)
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=LINT_IMPORTS_TIMEOUT_S,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "raftsched.replica.raft.journal -> raftsched.replica.identity" in output, output
    assert "replica.raft) imports nothing above it" in output and "BROKEN" in output, output
