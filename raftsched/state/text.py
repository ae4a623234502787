"""Free text a caller stores — a cancel or drain reason, a token's note, a revoked certificate's
subject and reason — and how any text from the state is shown on a terminal.

One rule for stored text, the job spec's rule for a job's name: printable (`str.isprintable`:
no C0 or C1 control character, no DEL, no format character such as the bidi override U+202E,
no line or paragraph separator; a plain space is fine). The CLI checks it before it sends and
the replicas before they propose. The state machine does not refuse a cancel, drain or
revocation for its text (a log written before the rule must replay to the same outcome: the job
still cancelled, the certificate still revoked); it stores the text through `visible`, escaped.
A token's note was refused at apply before the rule and still is.

Text the state holds can still be unprintable: an agent's report of why an attempt ended, a
certificate's common name, state written before the rule. `visible` shows it on a terminal
with every unprintable character escaped (`\\x1b`, `\\n`, `\\u202e`), so that it can neither
move the cursor nor fake a line.
"""

from __future__ import annotations

from raftsched.spec.issue import show

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def text_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be stored as the free text `field` (INVALID_ARGUMENT), or None. Its
    length is the caller's bound (MAX_REASON_CHARS, MAX_TOKEN_NOTE_CHARS, ...)."""
    problem = unprintable(value)
    return None if problem is None else f"{field}: {problem}"


def unprintable(value: str) -> str | None:
    """What is wrong with `value` as stored free text (no field named), or None."""
    if value.isprintable():
        return None
    return (f"must be printable text (no control or format characters such as escape, "
            f"newline or U+202E), got {show(value)}")


def visible(text: str) -> str:
    """`text` with every unprintable character escaped as Python writes it in a string literal
    (backslashes themselves are left alone: this is for eyes, not for parsing back)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
