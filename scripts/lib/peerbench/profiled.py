"""Runs `python -m MODULE ARGS...` under yappi (every thread; CPU clock, or the one named by
PEERBENCH_YAPPI_CLOCK: "wall"), for `scripts/bench hops`:

    python scripts/lib/peerbench/profiled.py OUT_PREFIX MODULE [ARGS...]

SIGUSR1 saves what was profiled since the last save to OUT_PREFIX.<n>.pstat (pstats format) and
starts over; the rest is saved at exit. yappi comes from the directory in PEERBENCH_YAPPI_PATH
(installed there by `scripts/bench hops`, never into raftsched's virtualenv).
"""

from __future__ import annotations

import atexit
import itertools
import os
import runpy
import signal
import sys
from types import FrameType

sys.path.insert(0, os.environ["PEERBENCH_YAPPI_PATH"])

import yappi

_saves = itertools.count()


def save(prefix: str) -> None:
    """The functions' stats (pstats) and CPU seconds per thread (`name seconds` lines)."""
    path = f"{prefix}.{next(_saves)}"
    yappi.get_func_stats().save(f"{path}.pstat", type="pstat")
    with open(f"{path}.threads", "w") as out:
        for thread in yappi.get_thread_stats():
            out.write(f"{thread.name} {thread.ttot:.6f}\n")
    yappi.clear_stats()


def main() -> None:
    prefix, module, *args = sys.argv[1:]

    def on_usr1(signum: int, frame: FrameType | None) -> None:
        save(prefix)

    signal.signal(signal.SIGUSR1, on_usr1)
    atexit.register(save, prefix)
    yappi.set_clock_type(os.environ.get("PEERBENCH_YAPPI_CLOCK", "cpu"))
    yappi.start(builtins=False, profile_threads=True)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
