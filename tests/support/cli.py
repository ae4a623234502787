"""Running the real `raftsched` command line against a dev cluster, as a user would: a child
process with the dev dir in `$RAFTSCHED_DEV_DIR` and none of the caller's own cluster settings."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLI_TIMEOUT_S = 60.0
"""One CLI command's run, at most (a `--watch` waits for its job)."""


def run_cli(dev_dir: Path, *argv: str, timeout_s: float = CLI_TIMEOUT_S,
            hidden: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`raftsched ARGV...` for the dev cluster of `dev_dir`; `$RAFTSCHED_SERVERS`,
    `$RAFTSCHED_TLS_*` and variables starting with any of `hidden` are left out."""
    env = {key: value for key, value in os.environ.items()
           if key != "RAFTSCHED_SERVERS" and not key.startswith(("RAFTSCHED_TLS_", *hidden))}
    env["RAFTSCHED_DEV_DIR"] = str(dev_dir)
    return subprocess.run([sys.executable, "-m", "raftsched", *argv], capture_output=True,
                          text=True, timeout=timeout_s, env=env, check=False)


def parsed_ok(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a command printed, once it exited 0 without a traceback."""
    assert result.returncode == 0 and "Traceback" not in result.stderr, (
        f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout)


@contextlib.contextmanager
def dev_cluster_dir(prefix: str) -> Iterator[Path]:
    """A fresh private directory (`mktemp -d`: 0700) for a dev cluster, whose cluster is
    stopped at the end whatever happened (and the directory removed once it stopped)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield directory
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            down = run_cli(directory, "dev", "down", "--dir", str(directory))
            if down.returncode == 0:
                shutil.rmtree(directory, ignore_errors=True)
