"""`raftsched replica --group I --groups K --topology ...` (issue 27): what the options say the
replica's group is, and a precise start error for options that do not fit together."""

from __future__ import annotations

import argparse

import pytest

from raftsched import limits
from raftsched.replica import main
from raftsched.state import commands as c
from raftsched.state.model import GroupIdentity

BASE = ["--raft", "127.0.0.1:7000", "--grpc", "127.0.0.1:8000", "--data-dir", "/nonexistent",
        "--insecure-dev"]
TOPOLOGY = "10.0.0.1:8000,10.0.0.2:8000;10.0.1.1:8000"


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    main.add_arguments(parser)
    return parser.parse_args([*BASE, *extra])


def test_one_group_is_no_group_and_the_topology_gives_the_count_and_servers() -> None:
    assert main.configured_group(_args()) is None
    assert main.configured_group(_args("--group", "1", "--groups", "3")) == \
        GroupIdentity(1, 3, limits.VIRTUAL_SHARDS)
    assert main.configured_group(_args("--group", "1", "--topology", TOPOLOGY)) == \
        GroupIdentity(1, 2, limits.VIRTUAL_SHARDS,
                      (("10.0.0.1:8000", "10.0.0.2:8000"), ("10.0.1.1:8000",)))


@pytest.mark.parametrize(("extra", "words"), [
    (("--groups", "3", "--topology", TOPOLOGY), "--topology names 2 groups, --groups says 3"),
    (("--group", "2", "--topology", TOPOLOGY), "--group 2 is not one of the --groups 2"),
    (("--topology", "10.0.0.1:8000;;10.0.1.1:8000"), "--topology (group 1): no addresses"),
    (("--topology", "10.0.0.1:8000;nohost"), "--topology (group 1): 'nohost' is not HOST:PORT"),
])
def test_options_that_do_not_fit_are_a_start_error_naming_them(extra: tuple[str, ...],
                                                               words: str) -> None:
    with pytest.raises(main._StartError) as refused:
        main.configured_group(_args(*extra))
    assert words in refused.value.message, refused.value.message


def test_joining_needs_several_groups_and_is_written_into_the_group_set() -> None:
    """`--joining` (a group added to a running deployment) is a start error for a deployment
    of one group; with several, the first leader's GROUP_SET says the group joins."""
    with pytest.raises(main._StartError) as refused:
        main._checked_bootstrap(_args("--joining"), main.configured_group(_args("--joining")))
    assert "--joining: a group added to a deployment is one of several" in refused.value.message
    args = _args("--group", "2", "--groups", "3", "--joining")
    office = main._checked_bootstrap(args, main.configured_group(args))
    entry = c.decode(office[-1](5))
    assert entry == c.GroupSet(2, 3, limits.VIRTUAL_SHARDS, 5, (), joining=True)
    plain = _args("--group", "2", "--groups", "3")
    assert c.decode(main._checked_bootstrap(plain, main.configured_group(plain))[-1](5)) == \
        c.GroupSet(2, 3, limits.VIRTUAL_SHARDS, 5, ())
