"""scripts/bench list — what one ListJobs read costs with N jobs in the state (default 100,000).

The state is built through the state machine (scripts/lib/statebench.py); each figure is the
view alone (`views.list_jobs`, what a replica runs under its apply lock), median and worst of
--repeat calls, on one core. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))

from statebench import state_with_jobs  # noqa: E402

from raftsched.api import raftsched_pb2 as pb  # noqa: E402
from raftsched.replica import views  # noqa: E402
from raftsched.state.model import State  # noqa: E402
from raftsched.states import JobStateName  # noqa: E402

CASES: list[tuple[str, dict[str, Any]]] = [
    ("first page, newest first (50)", {"newest_first": True, "limit": 50}),
    ("first page, oldest first (50)", {"limit": 50}),
    ("tenant beta, newest first", {"newest_first": True, "limit": 50, "tenant": "beta"}),
    ("state FAILED, newest first", {"newest_first": True, "limit": 50,
                                    "state": JobStateName.FAILED}),
    ("tenant beta + FAILED", {"newest_first": True, "limit": 50, "tenant": "beta",
                              "state": JobStateName.FAILED}),
    ("query 'etl-train' (common)", {"newest_first": True, "limit": 50, "query": "etl-train"}),
    ("query 'job-0000042' (one job)", {"newest_first": True, "limit": 50,
                                       "query": "job-0000042"}),
    ("query 'nothing' (no match)", {"newest_first": True, "limit": 50, "query": "nothing"}),
]


def timed(state: State, request: pb.ListJobsRequest, repeat: int) -> tuple[list[float], Any]:
    times = []
    response = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        response = views.list_jobs(state, request)
        times.append((time.perf_counter() - t0) * 1000)
    return times, response


def deep_token(state: State, pages: int) -> str:
    """The token of page `pages` of a newest-first listing (50 a page)."""
    token = ""
    for _ in range(pages):
        token = views.list_jobs(state, pb.ListJobsRequest(
            newest_first=True, limit=50, page_token=token)).next_page_token
    return token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    t0 = time.perf_counter()
    state = state_with_jobs(args.jobs)
    print(f"raftsched ListJobs benchmark: {len(state.jobs):,} jobs built through the state "
          f"machine in {time.perf_counter() - t0:.1f} s (python {sys.version.split()[0]})")
    deep = {"newest_first": True, "limit": 50, "page_token": deep_token(state, 1_000)}
    cases = [*CASES, ("page 1,000 deep, newest first", deep)]
    for label, fields in cases:
        times, response = timed(state, pb.ListJobsRequest(**fields), args.repeat)
        counts = " ".join(f"{k}={v}" for k, v in sorted(response.state_counts.items()) if v)
        partial = " (partial)" if response.state_counts_partial else ""
        print(f"  {label:34} median {statistics.median(times):7.3f} ms  max "
              f"{max(times):7.3f} ms  {len(response.jobs):3} jobs  counts {counts}{partial}")


if __name__ == "__main__":
    main()
