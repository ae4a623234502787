"""The DAG graph of a job page, laid out in Python and drawn as inline SVG by the template.

Pure: tasks in (id, state, what it runs after), a drawing out. Layers by longest path from the
roots (a task sits one layer right of its latest dependency), then a few barycenter sweeps order
each layer by the mean position of its neighbours in the layer before (then after), which
uncrosses most edges of the fan-out/fan-in shapes jobs have. Above `limits.WEB_GRAPH_MAX_NODES`
tasks the drawing is collapsed: one group node per layer with its counts per state, and one edge
between consecutive layers, so a 10,000-task job draws as fast as a small one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from raftsched import limits

NODE_W = 150
NODE_H = 28
GAP_X = 60
GAP_Y = 12
MARGIN = 10
BARYCENTER_SWEEPS = 2
"""Down-and-up sweeps of the ordering (each is O(edges log) per layer)."""


@dataclass(frozen=True, slots=True)
class TaskNode:
    task_id: str
    state: str
    depends_on: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Box:
    """A drawn node: a task (`task_id`) or a collapsed layer (`counts`)."""
    x: int
    y: int
    label: str
    state: str
    task_id: str = ""
    counts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True, slots=True)
class Drawing:
    width: int
    height: int
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    collapsed: bool


def layers_of(tasks: Sequence[TaskNode]) -> list[list[str]]:
    """Longest-path layering (iterative, in dependency order; unknown dependencies ignored)."""
    known = {t.task_id: t for t in tasks}
    layer: dict[str, int] = {}
    for task in tasks:
        stack = [task.task_id]
        while stack:
            current = stack[-1]
            if current in layer:
                stack.pop()
                continue
            deps = [d for d in known[current].depends_on if d in known]
            todo = [d for d in deps if d not in layer]
            if todo:
                stack.extend(todo)
                continue
            layer[current] = 1 + max((layer[d] for d in deps), default=-1)
            stack.pop()
    result: list[list[str]] = [[] for _ in range(1 + max(layer.values(), default=-1))]
    for task in tasks:
        result[layer[task.task_id]].append(task.task_id)
    return result


def _order(layers: list[list[str]], tasks: Sequence[TaskNode]) -> list[list[str]]:
    parents = {t.task_id: t.depends_on for t in tasks}
    children: dict[str, list[str]] = {t.task_id: [] for t in tasks}
    for task in tasks:
        for dep in task.depends_on:
            if dep in children:
                children[dep].append(task.task_id)
    ordered = [list(layer) for layer in layers]
    for _ in range(BARYCENTER_SWEEPS):
        for i in range(1, len(ordered)):
            ordered[i] = _by_barycenter(ordered[i], ordered[i - 1], parents)
        for i in range(len(ordered) - 2, -1, -1):
            ordered[i] = _by_barycenter(ordered[i], ordered[i + 1], children)
    return ordered


def _by_barycenter(layer: list[str], neighbours_layer: list[str],
                   neighbours: dict[str, tuple[str, ...]] | dict[str, list[str]]) -> list[str]:
    position = {task_id: i for i, task_id in enumerate(neighbours_layer)}

    def key(item: tuple[int, str]) -> tuple[float, int]:
        index, task_id = item
        seen = [position[n] for n in neighbours[task_id] if n in position]
        return (sum(seen) / len(seen) if seen else float(index), index)

    return [task_id for _, task_id in sorted(enumerate(layer), key=key)]


def draw(tasks: Sequence[TaskNode], max_nodes: int = limits.WEB_GRAPH_MAX_NODES) -> Drawing:
    layers = layers_of(tasks)
    if len(tasks) > max_nodes:
        return _collapsed(layers, {t.task_id: t.state for t in tasks})
    ordered = _order(layers, tasks)
    where: dict[str, tuple[int, int]] = {}
    boxes = []
    states = {t.task_id: t.state for t in tasks}
    for column, layer in enumerate(ordered):
        for row, task_id in enumerate(layer):
            x, y = MARGIN + column * (NODE_W + GAP_X), MARGIN + row * (NODE_H + GAP_Y)
            where[task_id] = (x, y)
            boxes.append(Box(x, y, task_id, states[task_id], task_id=task_id))
    edges = [Edge(where[d][0] + NODE_W, where[d][1] + NODE_H // 2,
                  where[t.task_id][0], where[t.task_id][1] + NODE_H // 2)
             for t in tasks for d in t.depends_on if d in where]
    rows = max((len(layer) for layer in ordered), default=0)
    return Drawing(_extent(len(ordered), NODE_W + GAP_X), _extent(rows, NODE_H + GAP_Y),
                   tuple(boxes), tuple(edges), collapsed=False)


def _collapsed(layers: list[list[str]], states: dict[str, str]) -> Drawing:
    boxes = []
    for column, layer in enumerate(layers):
        counts = Counter(states[t] for t in layer)
        worst = _dominant(counts)
        boxes.append(Box(MARGIN + column * (NODE_W + GAP_X), MARGIN,
                         f"layer {column + 1}: {len(layer)} tasks", worst,
                         counts=tuple(sorted(counts.items()))))
    edges = [Edge(a.x + NODE_W, a.y + NODE_H // 2, b.x, b.y + NODE_H // 2)
             for a, b in itertools.pairwise(boxes)]
    return Drawing(_extent(len(layers), NODE_W + GAP_X), _extent(1, NODE_H + GAP_Y) + 40,
                   tuple(boxes), tuple(edges), collapsed=True)


_ATTENTION = ("FAILED", "RUNNING", "ASSIGNED", "RETRY_WAIT", "RUNNABLE", "PENDING")


def _dominant(counts: Counter[str]) -> str:
    """A group's colour: its most telling state present (failed first, then running, ...)."""
    for state in _ATTENTION:
        if counts.get(state):
            return state
    return counts.most_common(1)[0][0] if counts else "PENDING"


def _extent(count: int, step: int) -> int:
    return 2 * MARGIN + max(count, 1) * step
