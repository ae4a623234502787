"""What the console's in-process tests share: the CSRF token a rendered page carries."""

from __future__ import annotations

CSRF_MARKER = 'name="csrf" value="'


def csrf_of(page: str) -> str:
    """The value of the first `csrf` hidden field of an HTML page (ValueError when none)."""
    start = page.index(CSRF_MARKER) + len(CSRF_MARKER)
    return page[start:page.index('"', start)]
