"""Value types for command-line options, shared by the CLI and the servers' own options: each
refuses a bad value with a message argparse prints as a usage error (exit 2)."""

from __future__ import annotations

import argparse
import math

MAX_OPTION_SECONDS = 24 * 3600.0
"""A duration option is at most a day."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_OPTION_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be > 0 and at most {MAX_OPTION_SECONDS:g} seconds, got {text}")
    return value
