"""`scripts/bench grow`: what adding a scheduler group costs a running deployment (issue 27,
docs/scale-out.md §5), real processes on this machine.

For each count of remembered idempotency keys N (`--keys`, default 10,000 and 50,000): `raftsched
dev up` of one group (3 replicas, plaintext, 2 mock agents), N keyed one-task jobs submitted in
SubmitJobs batches (they run), then `raftsched dev add-group` (a second group of 3 replicas, each
agent drained, restarted with both groups and undrained, then the shards moved: half of them,
with their keys) while PROBES threads submit keyed one-task jobs one after another: half with
keys of the shards that move, half of the shards that stay. Prints, per N:
- the whole `dev add-group` time and the move's own (from "step 1/3" to its end, its lines
  timestamped as they arrive), and the keys handed over;
- how long a submit of a moving shard took at most (it waits while its shard is marked: the
  client retries UNAVAILABLE, then follows the new owner);
- the submit latency p50 / p99 of the shards that stay, during the move against before it (the
  ratio: 1.00 means they did not notice the move).
The cluster is stopped after each N, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_groups import dev_json, wait_terminal

from raftsched import limits, topology
from raftsched.client.client import Client
from raftsched.client.groups import with_topology
from raftsched.errors import Code, RaftschedError
from raftsched.spec.job import parse_spec_text

UP_TIMEOUT_S = 240.0
PHASE_TIMEOUT_S = 900.0
PROBES = 8
BATCH = 2_000
"""Keyed jobs per SubmitJobs call while filling the state."""
LIVE_AHEAD = 50_000
"""While filling, submits wait until all but this many jobs are finished (MAX_LIVE_JOBS)."""
MOVED = frozenset(s for s, _ in topology.balancing_moves(bytes(limits.VIRTUAL_SHARDS), 2))
SPEC = parse_spec_text("name: grow\ntasks:\n  - {id: a, command: [mock]}\n")


def _connect(servers: list[str]) -> Any:
    return with_topology(Client(servers, timeout_s=10, retry_budget_s=60),
                         lambda group: Client(group, timeout_s=10, retry_budget_s=60))


def _fill(servers: list[str], keys: int) -> None:
    """`keys` keyed jobs, never more than LIVE_AHEAD of them live (MAX_LIVE_JOBS bounds the
    live ones; a finished job keeps its key)."""
    client = Client(servers, timeout_s=60, retry_budget_s=120)
    try:
        for start in range(0, keys, BATCH):
            wait_terminal(client, start - LIVE_AHEAD, PHASE_TIMEOUT_S)
            count = min(BATCH, keys - start)
            answers = client.submit_jobs([SPEC] * count,
                                         [f"fill-{n}" for n in range(start, start + count)])
            refused = [a for a in answers if isinstance(a, RaftschedError)]
            if refused:
                raise SystemExit(f"filling the state: {refused[0]}")
    finally:
        client.close()


class Probe(threading.Thread):
    """Keyed submits one after another, all in moving shards or all in staying ones:
    (start, seconds) of each."""

    def __init__(self, index: int, servers: list[str], moving: bool,
                 stop: threading.Event) -> None:
        super().__init__(name=f"probe-{index}", daemon=True)
        self.index, self.servers, self.moving, self.stop = index, servers, moving, stop
        self.samples: list[tuple[float, float]] = []
        self.error: BaseException | None = None

    def _keys(self) -> Any:
        n = 0
        while True:
            n += 1
            key = f"probe-{self.index}-{n}"
            if (topology.shard_of_key(SPEC.tenant, key) in MOVED) == self.moving:
                yield key

    def run(self) -> None:
        client = _connect(self.servers)
        try:
            for key in self._keys():
                if self.stop.is_set():
                    return
                start = time.perf_counter()
                client = self._submit(client, key)
                self.samples.append((start, time.perf_counter() - start))
        except BaseException as error:  # reported by the runner
            self.error = error
        finally:
            client.close()

    def _submit(self, client: Any, key: str) -> Any:
        """Submit until it is taken, following the deployment's growth (a refusal as another
        group's shard: connect again, learning the groups); returns the client to go on with."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                client.submit_spec(SPEC, key)
                return client
            except RaftschedError as error:
                if error.code not in (Code.FAILED_PRECONDITION, Code.UNAVAILABLE,
                                      Code.DEADLINE_EXCEEDED):
                    raise
                client.close()
                client = _connect(self.servers)
        raise SystemExit(f"submit of {key} not taken within {PHASE_TIMEOUT_S} s")


def _add_group(directory: Path) -> tuple[dict[str, Any], float, float, float]:
    """`dev add-group`, its progress lines timestamped: (its JSON, when it started, when the
    move began ("step 1/3"), when it ended)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "raftsched", "dev", "add-group", "--dir",
                             str(directory), "--json", "--timeout", str(UP_TIMEOUT_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    move_began = 0.0
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        if "step 1/3" in line and not move_began:
            move_began = time.perf_counter()
    out = proc.stdout.read()
    if proc.wait(timeout=PHASE_TIMEOUT_S) != 0:
        raise SystemExit(f"raftsched dev add-group failed:\n{out[-3000:]}")
    return json.loads(out), started, move_began or started, time.perf_counter()


def _ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run_once(keys: int, root: Path) -> dict[str, Any]:
    directory = root / f"keys-{keys}"
    directory.mkdir()
    stop = threading.Event()
    probes: list[Probe] = []
    try:
        cluster = dev_json("up", "--dir", str(directory), "--executor", "mock", "--insecure-dev",
                           "--timeout", str(UP_TIMEOUT_S), timeout_s=UP_TIMEOUT_S + 60)
        servers = cluster["groups"][0]
        _fill(servers, keys)
        probes = [Probe(i, servers, i % 2 == 0, stop) for i in range(PROBES)]
        for probe in probes:
            probe.start()
        time.sleep(5.0)  # samples from before the move
        added, started, move_began, ended = _add_group(directory)
        time.sleep(2.0)
        stop.set()
        for probe in probes:
            probe.join(60)
        errors = [p.error for p in probes if p.error]
        if errors:
            raise SystemExit(f"a probe failed: {errors[0]!r}")
        staying = [p for p in probes if not p.moving]
        before = [s for p in staying for t, s in p.samples if t + s < started]
        during = [s for p in staying for t, s in p.samples if move_began <= t <= ended]
        moving = [s for p in probes if p.moving for t, s in p.samples
                  if t <= ended and t + s >= move_began]
        return {"keys": keys, "add_group_s": ended - started, "move_s": ended - move_began,
                "keys_imported": added["keys_imported"], "moved": added["moved"],
                "moving_max_s": max(moving, default=0.0),
                "before_p50_ms": _ms(before, 0.5), "before_p99_ms": _ms(before, 0.99),
                "during_p50_ms": _ms(during, 0.5), "during_p99_ms": _ms(during, 0.99),
                "samples": (len(before), len(during), len(moving))}
    finally:
        stop.set()
        subprocess.run([sys.executable, "-m", "raftsched", "dev", "down", "--dir",
                        str(directory)], capture_output=True, timeout=180, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench grow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="10000,50000",
                        help="remembered idempotency keys before the move, comma-separated "
                             "(default 10000,50000)")
    args = parser.parse_args()
    try:
        counts = [int(part) for part in args.keys.split(",")]
    except ValueError:
        parser.error(f"--keys: {args.keys!r} is not a comma-separated list of numbers")
    if any(not 0 <= n <= limits.MAX_RETAINED_JOBS for n in counts):
        parser.error(f"--keys: each 0..MAX_RETAINED_JOBS ({limits.MAX_RETAINED_JOBS:,}): a "
                     "key is forgotten with its job")
    with tempfile.TemporaryDirectory(prefix="bench-grow-") as root:
        for keys in counts:
            print(f"  {keys:,} keys: filling, then dev add-group under {PROBES} probes ...",
                  file=sys.stderr, flush=True)
            row = run_once(keys, Path(root))
            staying = row["during_p50_ms"] / row["before_p50_ms"] if row["before_p50_ms"] else 0
            print(f"{keys:>9,} keys: dev add-group {row['add_group_s']:.1f} s, the move "
                  f"{row['move_s']:.1f} s ({row['moved']:,} shards, {row['keys_imported']:,} "
                  f"keys handed over); a moving shard's submit waited at most "
                  f"{row['moving_max_s']:.2f} s; staying shards' submits p50 / p99 "
                  f"{row['before_p50_ms']:.1f} / {row['before_p99_ms']:.1f} ms before, "
                  f"{row['during_p50_ms']:.1f} / {row['during_p99_ms']:.1f} ms during "
                  f"({staying:.2f}x); samples before/during/moving {row['samples']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
