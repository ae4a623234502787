"""`raftsched dev down`: stop every process of the recorded cluster. (Part of the dev cluster,
`raftsched.dev`.)"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from raftsched.dev import slurm as private_slurm
from raftsched.dev.launch import _report_job_processes
from raftsched.dev.processes import require_proc
from raftsched.dev.record import DevClusterError, Progress, exclusive, load_state, state_path
from raftsched.dev.supervisor import (
    StopOutcome,
    StopResult,
    stop_all,
)
from raftsched.errors import Code

if TYPE_CHECKING:  # raftsched.tls imports grpc, which `raftsched --help` does not load
    pass



def down(directory: Path, progress: Progress = lambda message: None) -> list[StopResult] | None:
    """Stop the processes recorded in DIR/cluster.json and remove that file; None when nothing
    is recorded (already down). The agents and replicas go first (so nothing submits to Slurm
    any more), then the private Slurm: its jobs cancelled, their processes waited for, its
    daemons stopped (`private_slurm.stop_daemons`). Raises, keeping the file, if a process
    survives SIGKILL."""
    require_proc()
    directory = directory.resolve()
    if load_state(directory) is None:  # before `exclusive`, which would create the directory
        return None
    with exclusive(directory):
        state = load_state(directory)
        if state is None:
            return None
        results = stop_all(state.processes())
        if state.slurm is not None:
            stopped = private_slurm.stop_daemons(state.slurm.processes(), Path(state.slurm.conf))
            results += stopped.results
            _report_job_processes(stopped.job_processes, progress)
            if state.slurm.socket_dir:
                shutil.rmtree(state.slurm.socket_dir, ignore_errors=True)
        survivors = [r for r in results if r.outcome is StopOutcome.SURVIVED]
        if survivors:
            names = ", ".join(f"{r.name} (pid {r.pid})" for r in survivors)
            raise DevClusterError(Code.UNAVAILABLE, f"still running after SIGKILL: {names}; "
                                                    f"{state_path(directory)} is kept")
        state_path(directory).unlink()
        return results
