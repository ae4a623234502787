"""What a proposal can end with besides an outcome: not the leader (nothing appended) or an
unknown outcome (it may still commit: retry with the same request id)."""

from __future__ import annotations

from pysyncobj.config import FAIL_REASON

from raftsched.errors import Code, RaftschedError


class NotLeader(RaftschedError):
    """This replica is not the leader; nothing was appended. `leader` is the last known one."""

    def __init__(self, leader: str | None) -> None:
        where = f"the leader is {leader}" if leader else "no leader is known right now"
        super().__init__(Code.UNAVAILABLE, f"this replica is not the leader; {where}")
        self.leader = leader


class OutcomeUnknown(RaftschedError):
    """The command may or may not have committed."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            Code.DEADLINE_EXCEEDED,
            f"{detail}: the command may or may not have committed; retry with the same request id",
        )


_FAIL_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}


def fail_name(reason: object) -> str:
    """pysyncobj's FAIL_REASON value by its name (the value itself when it has none)."""
    name: str = _FAIL_NAMES.get(reason, str(reason))
    return name
