"""The one rule for free text the state stores (printable, `raftsched.state.text`), checked
by the replicas before they propose (the state machine stores it escaped, so that a log
written before the rule replays to the same outcome), and `visible`, which shows
any text on a terminal with its unprintable characters escaped (issue 21, finding 12)."""

from __future__ import annotations

import pytest

from raftsched.errors import Code
from raftsched.state import commands as c
from raftsched.state.outcome import Outcome, Rejected
from raftsched.state.text import text_problem, visible
from tests.support.fsmkit import Harness, job_doc, task_doc

UNPRINTABLE = ["\x1b[2J", "two\nlines", "tab\t", "cr\r", "del\x7f", "c1 \x9b", "nul\x00",
               "bidi \u202e", "zero width \u200b", "line sep \u2028", "nbsp\u00a0"]
PRINTABLE = ["", "maintenance window", "café 日本", "a\\x1b literal backslash", "😀"]


@pytest.mark.parametrize("value", UNPRINTABLE)
def test_unprintable_text_is_refused_naming_the_field(value: str) -> None:
    problem = text_problem("reason", value)
    assert problem is not None and problem.startswith("reason: must be printable text")
    assert visible(problem).isprintable() and problem.isprintable()  # shown escaped


@pytest.mark.parametrize("value", PRINTABLE)
def test_printable_text_is_fine_and_shown_as_it_is(value: str) -> None:
    assert text_problem("note", value) is None
    assert visible(value) == value


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J\nfake line", "\\x1b[2J\\nfake line"),
    ("a\tb\rc", "a\\tb\\rc"),
    ("\x7f\x9b\x00", "\\x7f\\x9b\\x00"),
    ("x\u202ey", "x\\u202ey"),
    ("\U000e0001", "\\U000e0001"),
])
def test_visible_escapes_every_unprintable_character(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(raw).isprintable()


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.register("east")
    harness.ok(c.JobSubmit("j1", c_wire(), harness.now_ms))
    return harness


def c_wire() -> list[object]:
    from raftsched.spec.wire import doc_to_wire

    return doc_to_wire(job_doc([task_doc("a")]))


def refused(outcome: Outcome, field: str) -> None:
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == Code.INVALID_ARGUMENT
    assert outcome.reason.startswith(f"{field}: must be printable text"), outcome.reason


@pytest.mark.parametrize("value", UNPRINTABLE)
def test_the_state_machine_applies_unprintable_free_text_escaped(h: Harness, value: str) -> None:
    """The replicas refuse such text before proposing; an entry that carries it anyway (a log
    written before the rule) keeps its outcome, with the text stored escaped."""
    h.ok(c.JobCancel("j1", h.now_ms, value))
    assert h.job("j1").cancel_requested and h.job("j1").reason == visible(value)
    h.ok(c.ClusterDrain("east", True, h.now_ms, value))
    assert h.state.clusters["east"].draining
    assert h.state.clusters["east"].drain_reason == visible(value)
    h.ok(c.CertRevoke("ab" * 32, value, value, h.now_ms))
    record = h.state.revoked_certs["ab" * 32]
    assert (record.subject, record.reason) == (visible(value), visible(value))
    assert all(text.isprintable() for text in (record.subject, record.reason,
                                               h.job("j1").reason))


@pytest.mark.parametrize("value", UNPRINTABLE)
def test_a_token_note_stays_refused_at_apply(h: Harness, value: str) -> None:
    refused(h.run(c.TokenPut("0" * 16, b"d" * 32, "*", "user", value, h.now_ms)), "note")
    assert not h.state.tokens
