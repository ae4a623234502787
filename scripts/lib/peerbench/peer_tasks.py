"""Task bodies for the Dask workers (imported by reference there, so kept stdlib-only)."""

from __future__ import annotations

import time


def sleep_ms(duration_ms: int, *upstream: object) -> int:
    """The peers' mock task: sleep, like raftsched's `["mock", "sleep_ms=N"]`."""
    if duration_ms:
        time.sleep(duration_ms / 1000)
    return duration_ms


def noop(*upstream: object) -> None:
    return None
