"""The one way the replica proposes a command: the leader's own (barrier, placements, ticks,
cluster health) and those of clients and agents (gateway, service) go through `Proposer`, which
answers with one typed outcome. Two mappings read it: `result_or_error` for an RPC (the
`RaftschedError` whose code and message `rpc.abort` sends: the gRPC status clients see) and
`for_leader` for the leader's loop (a refusal is logged and passed over; anything else ends the
round). docs/architecture.md §4 describes the Raft adapter underneath (`raft.port.RaftPort`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from raftsched import limits
from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown
from raftsched.replica.raft.port import Pending, RaftPort
from raftsched.state import commands as c
from raftsched.state.outcome import Rejected
from raftsched.state.results import Result

log = EventLogger("raftsched.proposals")


@dataclass(frozen=True, slots=True)
class Committed:
    """The entry committed and the state machine applied it."""

    result: Result


@dataclass(frozen=True, slots=True)
class Refused:
    """The entry committed and the state machine refused it (deterministically, everywhere)."""

    code: Code
    reason: str
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class NotLeading:
    """Nothing was appended: this replica does not lead (or has not taken office, or stopped).
    `error` says so in the words clients always saw (a `NotLeader` names the leader)."""

    error: RaftschedError


@dataclass(frozen=True, slots=True)
class TooBig:
    """Nothing was appended: the encoded command is over the log's bounds."""

    message: str


@dataclass(frozen=True, slots=True)
class Unknown:
    """Appended, but no commit seen in time (or lost with a leadership change it may survive):
    it may still commit; a retry with the same request id is deduplicated."""

    error: OutcomeUnknown


ProposalOutcome = Committed | Refused | NotLeading | TooBig | Unknown


class Proposer:
    """Proposes over a `RaftPort` and waits up to `timeout_s` for the outcome. With `leading`,
    nothing is proposed unless it answers True (the leader's election barrier is applied);
    `committed` runs after every committed entry (the leader's wake-up)."""

    def __init__(self, node: RaftPort, *, timeout_s: float = limits.PROPOSE_TIMEOUT_S,
                 leading: Callable[[], bool] | None = None,
                 committed: Callable[[], None] | None = None) -> None:
        self._node = node
        self._timeout_s = timeout_s
        self._leading = leading
        self._committed = committed

    def propose(self, command: c.Command | bytes,
                appended: Callable[[], None] | None = None) -> ProposalOutcome:
        """Commit `command` (or its encoding). `appended` runs once the entry is in the log,
        before its commit is waited for: whatever is proposed from then on applies after it."""
        if self._leading is not None and not self._leading():
            return NotLeading(RaftschedError(Code.UNAVAILABLE, "not the leader"))
        try:
            data = command if isinstance(command, bytes) else c.encode(command)
            pending = self._node.submit(data)
        except c.CommandError as error:
            return TooBig(str(error))
        except NotLeader as error:
            return NotLeading(error)
        except RaftschedError as error:
            if error.code == Code.RESOURCE_EXHAUSTED:  # over MAX_ENTRY_BYTES
                return TooBig(error.message)
            return NotLeading(error)  # this Raft replica is closed or stopped
        if appended is not None:
            appended()
        return self._wait(pending)

    def _wait(self, pending: Pending) -> ProposalOutcome:
        try:
            outcome = pending.outcome(self._timeout_s)
        except NotLeader as error:
            return NotLeading(error)
        except OutcomeUnknown as error:
            return Unknown(error)
        if isinstance(outcome, Rejected):
            return Refused(outcome.code, outcome.reason, outcome.retry_after_ms)
        if self._committed is not None:
            self._committed()
        return Committed(outcome.result)


def error_of(outcome: ProposalOutcome) -> RaftschedError | None:
    """The one mapping from a proposal's outcome to what a client is told (None: committed)."""
    match outcome:
        case Committed():
            return None
        case Refused(code, reason, retry_after_ms):
            return RaftschedError(code, reason, retry_after_ms=retry_after_ms)
        case NotLeading(error) | Unknown(error):
            return error
        case TooBig(message):
            return RaftschedError(Code.RESOURCE_EXHAUSTED, message)


def result_or_error(outcome: ProposalOutcome) -> Result:
    """The committed result, or raise what the client is told (`error_of`)."""
    if isinstance(outcome, Committed):
        return outcome.result
    error = error_of(outcome)
    assert error is not None
    raise error


def for_leader(outcome: ProposalOutcome, what: str) -> Result | None:
    """The leader loop's reading: the result; None for a refusal (logged: the state moved on
    under the plan, the loop plans again); raise for the rest (not leading any more, unknown,
    too big: the round ends and `Leader._run` logs it)."""
    if isinstance(outcome, Committed):
        return outcome.result
    if isinstance(outcome, Refused):
        log.debug("leader_proposal_refused", command=what, code=outcome.code.value,
                 reason=outcome.reason)
        return None
    error = error_of(outcome)
    assert error is not None
    raise error
