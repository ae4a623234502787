"""A private, real single-node Slurm for integration tests: `raftsched.dev.slurm` (which `raftsched
dev up --slurm` uses too) plus `local_slurm()`, which skips a test loudly, with the reason, where
Slurm cannot run (not installed: scripts/test installs slurm-wlm and munge as root through
`ensure_slurm`; or not root)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from raftsched.dev.slurm import (
    CANCEL_TIMEOUT_S,
    CLIENTS,
    COMMAND_TIMEOUT_S,
    DAEMONS,
    DEF_MEM_PER_CPU_MB,
    NODE_CPUS,
    NODE_MEMORY_MB,
    PARTITION,
    POLL_S,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    LocalSlurm,
    SlurmError,
    binary,
    slurm_available,
)

__all__ = [
    "CANCEL_TIMEOUT_S", "CLIENTS", "COMMAND_TIMEOUT_S", "DAEMONS", "DEF_MEM_PER_CPU_MB",
    "NODE_CPUS", "NODE_MEMORY_MB", "PARTITION", "POLL_S", "START_TIMEOUT_S", "STOP_TIMEOUT_S",
    "LocalSlurm", "SlurmError", "binary", "local_slurm", "slurm_available",
]


@contextmanager
def local_slurm(directory: Path, *, start_timeout_s: float = START_TIMEOUT_S,
                cpus: int = NODE_CPUS, memory_mb: int = NODE_MEMORY_MB) -> Iterator[LocalSlurm]:
    """For a pytest fixture: skips (loudly, with the reason) when Slurm cannot run here."""
    import pytest

    reason = slurm_available()
    if reason is not None:
        pytest.skip(reason)
    with LocalSlurm(directory, start_timeout_s=start_timeout_s, cpus=cpus,
                    memory_mb=memory_mb) as slurm:
        yield slurm
