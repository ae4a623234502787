"""An agent given one group's servers (issue 27) learns every group's from a replica and keeps
them in DATA/topology.json; at its next start it serves what it learned from those same
servers at once, without waiting for a replica (a restart during a partition); one that never
learned them and gets no answer serves that group alone. Here no replica answers: 127.0.0.1
port 1 refuses every connection."""

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
    monkeypatch.setattr(main, "TOPOLOGY_FIRST_WAIT_S", 0.3)


def _discover(data_dir: Path) -> list[list[str]]:
    return main._discovered_groups(list(NOBODY), None, threading.Event(), data_dir)


def test_no_answer_and_nothing_saved_serves_the_given_group(tmp_path: Path) -> None:
    assert _discover(tmp_path) == [NOBODY]


def test_the_groups_learned_before_from_the_same_servers_are_served_at_once(
        tmp_path: Path) -> None:
    (tmp_path / main.TOPOLOGY_FILE).write_text(json.dumps({"servers": NOBODY,
                                                           "groups": GROUPS}))
    assert _discover(tmp_path) == GROUPS


@pytest.mark.parametrize("doc", [
    {"servers": ["10.9.9.9:1"], "groups": GROUPS},  # learned from other servers
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


def test_what_the_agent_serves_is_kept_for_its_next_start(tmp_path: Path) -> None:
    saved = tmp_path / main.TOPOLOGY_FILE
    main._keep_topology(tmp_path, NOBODY, GROUPS)
    assert json.loads(saved.read_text()) == {"servers": NOBODY, "groups": GROUPS}
    assert _discover(tmp_path) == GROUPS
    main._keep_topology(tmp_path, NOBODY, [NOBODY])  # one group: kept too (no wait next time)
    assert json.loads(saved.read_text())["groups"] == [NOBODY]
    (tmp_path / (main.TOPOLOGY_FILE + ".partial")).write_text("a crash's leftover")
    main._keep_topology(tmp_path, NOBODY, GROUPS)
    assert json.loads(saved.read_text())["groups"] == GROUPS


def test_a_stop_while_asking_ends_the_wait_at_once(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main, "TOPOLOGY_FIRST_WAIT_S", 600.0)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert main._discovered_groups(list(NOBODY), None, stop, tmp_path) == [NOBODY]
