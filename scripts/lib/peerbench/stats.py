"""Percentiles and Prometheus histogram quantiles: standard library only."""

from __future__ import annotations

import math
import re

_BUCKET = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)_bucket\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LE = re.compile(r'le="(?P<le>[^"]+)"')


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    assert values and 0 <= q <= 1
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of histogram `name` in Prometheus text, summed over label sets;
    empty when the histogram is not there."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        match = _BUCKET.match(line)
        if not match or match["name"] != name:
            continue
        le = _LE.search(match["labels"])
        if le:
            bound = math.inf if le["le"] == "+Inf" else float(le["le"])
            buckets[bound] = buckets.get(bound, 0.0) + float(match["value"])
    return buckets


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Like PromQL's histogram_quantile: linear within the bucket that holds rank q * count;
    None when there are no observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    below_bound, below_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return below_bound  # past the last finite bucket: its bound is all we know
            inside = count - below_count
            share = (rank - below_count) / inside if inside > 0 else 1.0
            return below_bound + (bound - below_bound) * share
        below_bound, below_count = bound, count
    return below_bound
