"""An agent given one group's servers (issue 27) learns every group's from a replica and keeps
them in DATA/topology.json; when no replica answers at its next start (a restart during a
partition) it serves the groups it learned from those same servers before, else that group
alone. Here no replica answers: 127.0.0.1 port 1 refuses every connection."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agent import main

NOBODY = ["127.0.0.1:1"]
GROUPS = [NOBODY, ["127.0.0.1:2", "127.0.0.1:3"]]


@pytest.fixture(autouse=True)
def _short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main, "TOPOLOGY_WAIT_S", 0.3)


def _discover(data_dir: Path) -> list[list[str]]:
    return main._discovered_groups(list(NOBODY), None, threading.Event(), data_dir)


def test_no_answer_and_nothing_saved_serves_the_given_group(tmp_path: Path) -> None:
    assert _discover(tmp_path) == [NOBODY]


def test_no_answer_serves_the_groups_learned_before_from_the_same_servers(
        tmp_path: Path) -> None:
    (tmp_path / main.TOPOLOGY_FILE).write_text(json.dumps({"servers": NOBODY,
                                                           "groups": GROUPS}))
    assert _discover(tmp_path) == GROUPS


@pytest.mark.parametrize("doc", [
    {"servers": ["10.9.9.9:1"], "groups": GROUPS},  # learned from other servers
    {"servers": NOBODY, "groups": [NOBODY]},  # one group
    {"servers": NOBODY, "groups": [NOBODY, ["not an address"]]},
    {"servers": NOBODY},
])
def test_a_saved_topology_of_other_servers_or_malformed_is_not_used(
        tmp_path: Path, doc: dict[str, object]) -> None:
    (tmp_path / main.TOPOLOGY_FILE).write_text(json.dumps(doc))
    assert _discover(tmp_path) == [NOBODY]


def test_a_file_that_is_not_json_is_not_used(tmp_path: Path) -> None:
    (tmp_path / main.TOPOLOGY_FILE).write_text("{not json")
    assert _discover(tmp_path) == [NOBODY]


def test_what_the_agent_serves_is_kept_only_when_it_was_learned_from_one_group(
        tmp_path: Path) -> None:
    saved = tmp_path / main.TOPOLOGY_FILE
    main._keep_topology(tmp_path, [NOBODY], GROUPS)
    assert json.loads(saved.read_text()) == {"servers": NOBODY, "groups": GROUPS}
    assert _discover(tmp_path) == GROUPS  # what a start no replica answers serves
    main._keep_topology(tmp_path, GROUPS, GROUPS)  # every group given: nothing to keep
    assert saved.exists()
    main._keep_topology(tmp_path, [NOBODY], [NOBODY])  # the deployment is one group now
    assert not saved.exists()
