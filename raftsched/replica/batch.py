"""SubmitJobs' pure parts: the call's bounds, how a job is named in its answer, and how the
admitted jobs are split into JOB_SUBMIT_BATCH entries that each fit under MAX_ENTRY_BYTES.

The handler (`service.SchedulerService.SubmitJobs`) admits each job exactly as SubmitJob admits
one (decode and validate its wire form, its key, its tenant, the bounds before proposal); a job
refused there gets its answer at once and is not proposed. The rest are committed in as few
entries as the entry size allows, and each gets the answer apply gave it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from raftsched import limits
from raftsched.api import raftsched_pb2 as pb
from raftsched.errors import RaftschedError
from raftsched.state.results import JobRefused, JobSubmitted


@dataclass(frozen=True, slots=True)
class Admitted:
    """A job of the call that passed admission: its place in the call, its id, its wire form."""

    index: int
    job_id: str
    wire: list[Any]


def call_problem(sizes: Sequence[int], labels: Sequence[str]) -> str | None:
    """Why a SubmitJobs call is refused as a whole (before anything is parsed), or None."""
    if not sizes:
        return "jobs: empty; send at least one job"
    if len(sizes) > limits.MAX_BATCH_JOBS:
        return f"jobs: {len(sizes)} jobs, over MAX_BATCH_JOBS={limits.MAX_BATCH_JOBS}"
    total = sum(sizes)
    if total > limits.MAX_BATCH_BYTES:
        return (f"jobs: {total} bytes of spec_wire in all, over "
                f"MAX_BATCH_BYTES={limits.MAX_BATCH_BYTES}; send fewer jobs per call")
    for index, label in enumerate(labels):
        if len(label) > limits.MAX_BATCH_LABEL_CHARS:
            return (f"jobs[{index}].label: longer than MAX_BATCH_LABEL_CHARS="
                    f"{limits.MAX_BATCH_LABEL_CHARS} characters")
    return None


def job_name(index: int, label: str) -> str:
    """How the job is named in its answer: jobs[3] (file nightly.yaml)."""
    return f"jobs[{index}] ({label})" if label else f"jobs[{index}]"


def refused(index: int, label: str, error: RaftschedError) -> Any:
    """The answer of a job refused before or at apply, its message naming it."""
    return pb.SubmitJobsAnswer(code=error.code.value,
                               message=f"{job_name(index, label)} {error.message}",
                               retry_after_ms=error.retry_after_ms)


def applied(index: int, label: str, answer: JobSubmitted | JobRefused) -> Any:
    """The answer of a job apply decided."""
    if isinstance(answer, JobRefused):
        return refused(index, label, RaftschedError(answer.code, answer.reason,
                                                    retry_after_ms=answer.retry_after_ms))
    return pb.SubmitJobsAnswer(job_id=answer.job_id, created=answer.created)


def entries(admitted: Sequence[Admitted],
            budget: int = limits.MAX_ENTRY_BYTES - limits.BATCH_ENTRY_OVERHEAD_BYTES,
            max_jobs: int = limits.MAX_JOBS_PER_BATCH_ENTRY) -> Iterator[list[Admitted]]:
    """The admitted jobs in order, split into runs whose packed [job_id, wire] items stay within
    `budget` bytes and `max_jobs` jobs (MAX_JOBS_PER_BATCH_ENTRY: a bounded hold of the apply
    lock): one JOB_SUBMIT_BATCH entry each. A job alone over the
    budget still gets a run of its own (encoding it then refuses it, naming the size)."""
    run: list[Admitted] = []
    size = 0
    for job in admitted:
        item = len(msgpack.packb([job.job_id, job.wire], use_bin_type=True))
        if run and (size + item > budget or len(run) >= max_jobs):
            yield run
            run, size = [], 0
        run.append(job)
        size += item
    if run:
        yield run

