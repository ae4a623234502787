"""`raftsched agent --servers` with several scheduler groups (issue 27): group i is the i-th
';'-separated list; an empty group or a bad address is a usage error naming the group."""

from __future__ import annotations

import pytest

from agent import main as agent_main
from raftsched import limits


def test_one_list_is_one_group_and_several_are_groups_in_order() -> None:
    assert agent_main._server_groups("a:1,b:2") == [["a:1", "b:2"]]
    assert agent_main._server_groups("a:1,b:2;c:3") == [["a:1", "b:2"], ["c:3"]]


@pytest.mark.parametrize(("text", "says"), [
    ("a:1;", "--servers (group 1): no addresses"),
    ("a:1;nohost", "--servers (group 1)"),
    (";".join(["a:1"] * (limits.MAX_GROUPS + 1)), f"--servers: {limits.MAX_GROUPS + 1} groups"),
    ("", "no scheduler addresses"),
])
def test_a_bad_group_is_a_usage_error_naming_it(text: str, says: str) -> None:
    with pytest.raises(agent_main.UsageError, match=f"^{says}".replace("(", r"\(")
                       .replace(")", r"\)")):
        agent_main._server_groups(text)
