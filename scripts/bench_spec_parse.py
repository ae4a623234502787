"""How long parsing a submitted spec holds the interpreter lock, in one process: the figures behind
limits.MAX_YAML_SPEC_BYTES and MAX_JSON_SPEC_BYTES and the wire-form decode (README: "What a
submit may cost the replicas").

A replica runs Raft in a thread beside the one that parses a SubmitJob; any stretch that keeps
the lock (a C parser, a cyclic collection, freeing a big structure) keeps Raft from heartbeating.
A thread here sleeps 5 ms at a time and records the longest it had to wait past that while the
parse ran: that is the longest hold. Each case runs --runs times and prints the shortest such
hold (other processes only ever lengthen it) and the parse's wall time.

Usage: scripts/bench spec [--runs N] [--tasks N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack

from raftsched import limits
from raftsched.replica import gc_pause
from raftsched.spec import wire
from raftsched.spec.job import parse_spec_text, parse_submitted_text
from raftsched.spec.model import JobSpec, SpecError
from raftsched.spec.validation import validate_job_doc
from raftsched.state import commands, fsm
from raftsched.state.model import State

TICK_S = 0.005
KiB = 1024


class HoldMeter:
    """The longest wait past TICK_S of a thread sleeping TICK_S at a time, while inside."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.longest_s = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(TICK_S)
            now = time.perf_counter()
            self.longest_s = max(self.longest_s, now - last - TICK_S)
            last = now

    def __enter__(self) -> HoldMeter:
        self._thread.start()
        time.sleep(10 * TICK_S)
        self.longest_s = 0.0
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(label: str, size: int, run: Callable[[], object], runs: int,
            settle: bool = True) -> None:
    """`settle`: a full collection first, so that none falls due during the run."""
    holds, walls = [], []
    for _ in range(runs):
        if settle:
            gc.collect()
        kept: list[object] = []
        with HoldMeter() as meter:
            started = time.perf_counter()
            with contextlib.suppress(SpecError):
                kept.append(run())
            walls.append(time.perf_counter() - started)
        holds.append(meter.longest_s)
        kept.clear()  # what the parse made is freed outside the measure (the replica frees a
        # spec task by task: SchedulerService.SubmitJob)
    print(f"{label:52s} {size / KiB:9.0f} KiB  hold {min(holds) * 1e3:7.1f} ms  "
          f"wall {min(walls) * 1e3:8.1f} ms", flush=True)


def text_shapes(size: int) -> dict[str, str]:
    """The worst shapes found: one-character items, many nodes per byte."""
    return {
        "YAML flow sequence of 'a,'": "tasks: [" + "a," * (size // 2) + "a]\n",
        "YAML flow sequence of '[],'": "tasks: [" + "[]," * (size // 3) + "a]\n",
        "YAML flow sequence of '{a: b},'": "tasks: [" + "{a: b}," * (size // 7) + "a]\n",
        "JSON array of '[[]],'": '{"tasks": [' + "[[]]," * (size // 5 - 4) + "0]}",
        "JSON array of '[],'": '{"tasks": [' + "[]," * (size // 3 - 4) + "0]}",
    }


def realistic(tasks: int) -> dict[str, Any]:
    return {"name": "big", "idempotency_key": "k", "tasks": [
        {"id": f"t{i}", "command": ["sh", "-c", f"echo hello {i}"],
         "resources": {"cpu": 0.1, "memory_mb": 16},
         **({"depends_on": [f"t{i - 1}"]} if i else {})} for i in range(tasks)]}


def bench_text(runs: int) -> None:
    for kind, bound in (("YAML", limits.MAX_YAML_SPEC_BYTES), ("JSON", limits.MAX_JSON_SPEC_BYTES)):
        for size in (bound, 2 * bound):
            for label, text in text_shapes(size).items():
                if label.startswith(kind):
                    measure(label, len(text), lambda t=text: parse_spec_text(t), runs)
    yaml_text = "tasks: [" + "a," * (limits.MAX_YAML_SPEC_BYTES // 2) + "a]\n"
    measure("past MAX_YAML_SPEC_BYTES: refused unparsed", len(yaml_text),
            lambda: parse_submitted_text(yaml_text, source="spec"), runs)


def bench_wire(tasks: int, runs: int) -> None:
    spec = validate_job_doc(realistic(tasks))
    data = wire.pack_wire(spec)

    def as_the_service_does() -> None:  # SchedulerService.SubmitJob, but for the proposal
        with gc_pause.paused():
            decoded = wire.decode_wire(data)
            proposed = wire.to_wire(decoded)
            specs = list(decoded.tasks)
            del decoded
            wire.release_wire(proposed)
            wire.drop_items(specs)

    measure(f"wire form, {tasks} tasks: decode, wire form, free", len(data),
            as_the_service_does, runs)
    measure(f"wire form, {tasks} tasks: decode_wire, GC on", len(data),
            lambda: wire.decode_wire(data), runs)
    measure(f"wire form, {tasks} tasks: one msgpack.unpackb", len(data),
            lambda: msgpack.unpackb(data), runs)
    command = commands.JobSubmit("big-1", wire.to_wire(spec), 1)
    measure(f"wire form, {tasks} tasks: JOB_SUBMIT encode", len(data),
            lambda: commands.encode(command), runs)

    def digest_paused() -> object:
        with gc_pause.paused():  # as the applier computes it (gc_pause.frozen_after)
            return spec.digest()

    measure(f"wire form, {tasks} tasks: digest, GC paused", len(data), digest_paused, runs)
    bench_apply_and_bomb(spec, runs)


def bench_apply_and_bomb(spec: JobSpec, runs: int) -> None:
    tasks = len(spec.tasks)
    entry = commands.encode(commands.JobSubmit("big-1", wire.to_wire(spec), 1))

    def apply_paused() -> object:  # as the applier does (node._apply_now, gc quiet)
        state = State()
        with gc_pause.paused():
            return state, fsm.apply(state, entry)

    measure(f"apply of the JOB_SUBMIT, {tasks} tasks, GC paused", len(entry), apply_paused, 1)
    bomb = wire.to_wire(spec)
    bomb[7] = [[*bomb[7][0][:2], [[]] * (wire._ITEM_ARRAYS - 10), *bomb[7][0][3:]]] * (tasks // 5)
    bomb_data = msgpack.packb(bomb)

    def bomb_paused() -> object:
        with gc_pause.paused():
            return wire.decode_wire(bomb_data)

    measure(f"{tasks // 5} tasks of {wire._ITEM_ARRAYS - 10} empty arrays, GC paused",
            len(bomb_data), bomb_paused, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=limits.MAX_TASKS_PER_JOB)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; longest hold of the lock, shortest of "
          f"{args.runs} runs", flush=True)
    bench_text(args.runs)
    bench_wire(args.tasks, args.runs)
    print(json.dumps({"yaml_bound": limits.MAX_YAML_SPEC_BYTES,
                      "json_bound": limits.MAX_JSON_SPEC_BYTES}))


if __name__ == "__main__":
    main()
