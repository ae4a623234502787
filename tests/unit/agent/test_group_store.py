"""Where an agent serving several groups keeps each group's fence store and outbox
(`agent.agent.group_store_dir`): DATA/groups/N, except that group 0 of an agent that served one
group before (a deployment that grew a group) keeps DATA's, so the fences it remembers stay in
force; an attempt of that one-group agent still recorded there is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.agent import FENCE_DIR, GROUPS_DIR, OUTBOX_DIR, AgentError, group_store_dir
from agent.fence import FenceStore
from agent.model import AttemptRecord, AttemptState, Resources
from agent.outbox import Outbox


def _one_group_agent(data: Path, attempts: int = 0) -> None:
    """What an agent that served one group leaves: its fence store and outbox in DATA."""
    FenceStore(data / FENCE_DIR).close()
    outbox = Outbox(data / OUTBOX_DIR)
    outbox.write(records=[AttemptRecord(fence, "job", "t", 1, AttemptState.RUNNING,
                                        Resources(), "", 0) for fence in range(1, attempts + 1)])
    outbox.close()


def test_a_fresh_data_dir_keeps_every_group_apart(tmp_path: Path) -> None:
    assert [group_store_dir(tmp_path, g) for g in (0, 1, 2)] == [
        tmp_path / GROUPS_DIR / str(g) for g in (0, 1, 2)]


def test_group_0_of_a_grown_agent_keeps_the_one_group_store(tmp_path: Path) -> None:
    _one_group_agent(tmp_path)
    assert group_store_dir(tmp_path, 0) == tmp_path
    assert group_store_dir(tmp_path, 1) == tmp_path / GROUPS_DIR / "1"


def test_an_agent_that_always_served_several_groups_keeps_group_0_apart(tmp_path: Path) -> None:
    _one_group_agent(tmp_path)
    (tmp_path / GROUPS_DIR / "0").mkdir(parents=True)
    assert group_store_dir(tmp_path, 0) == tmp_path / GROUPS_DIR / "0"


def test_attempts_of_the_one_group_agent_still_recorded_are_refused_by_name(
        tmp_path: Path) -> None:
    _one_group_agent(tmp_path, attempts=2)
    with pytest.raises(AgentError) as refused:
        group_store_dir(tmp_path, 0)
    assert "holds 2 attempt(s)" in str(refused.value) and "admin drain" in str(refused.value)
    assert group_store_dir(tmp_path, 1) == tmp_path / GROUPS_DIR / "1"  # only group 0 asks
