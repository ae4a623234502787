"""Calls per second from several client processes at once (one Python process is itself the
bottleneck of a client-side benchmark). Standard library only."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from .workloads import SUBMIT_PROCESSES

START_TIMEOUT_S = 60.0
"""Every submitting process must be ready (imported, connected) within this."""
JOIN_TIMEOUT_S = 5.0

Target = Callable[[Any, Any, Any], None]
"""target(args, barrier, out): get ready, barrier.wait(START_TIMEOUT_S), submit, then
out.put((monotonic start, monotonic end, calls))."""


def concurrent_rate(target: Target, args: Any, timeout_s: float) -> float:
    """Calls per second over all processes: total / (last end - first start). CLOCK_MONOTONIC is
    one clock for every process on the machine."""
    context = multiprocessing.get_context("spawn")  # gRPC and Celery do not survive fork well
    barrier = context.Barrier(SUBMIT_PROCESSES)
    out = context.Queue()
    processes = [context.Process(target=target, args=(args, barrier, out), daemon=True)
                 for _ in range(SUBMIT_PROCESSES)]
    for process in processes:
        process.start()
    try:
        spans = [out.get(timeout=timeout_s) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=JOIN_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
    return float(sum(s[2] for s in spans) / (max(s[1] for s in spans) - min(s[0] for s in spans)))
