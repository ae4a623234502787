"""The DAG graph of a job page, laid out in Python and drawn as inline SVG by the template.

Pure: tasks in (id, state, what it runs after), a drawing out. Layers by longest path from the
roots (a task sits one layer right of its latest dependency), then a few barycenter sweeps order
each layer by the mean position of its neighbours in the layer before (then after), which
uncrosses most edges of the fan-out/fan-in shapes jobs have. A layer of more than
`limits.WEB_GRAPH_LAYER_MAX_ROWS` tasks is wrapped, in that order, row by row into a block of up to
`limits.WEB_GRAPH_WRAP_COLUMNS` sub-columns (a 2,000-task fan-out is ~1,200 px wide and 400 rows
tall, not one 80,000 px column); edges into (out of) a wrapped block run along a bus beside its
left (right) side, then along the node's row. Above `limits.WEB_GRAPH_MAX_NODES`
tasks the drawing is collapsed: one group node per layer with its counts per state, and one edge
between consecutive layers, so a 10,000-task job draws as fast as a small one.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from raftsched import limits
from raftsched.states import TASK_QUEUED_AT_AGENT, TaskStateName

NODE_W = 150
NODE_H = 28
GAP_X = 60
WRAP_GAP_X = 10
"""Between the sub-columns of a wrapped layer (its nodes are one layer: tighter than GAP_X)."""
GAP_Y = 12
ROUTE_X = 20
"""How far left (right) of a wrapped block its edges turn onto their node's row."""
SHARES_Y = 26
SHARES_H = 8
"""A collapsed layer's node: its label, a bar of its states' shares, then a line per state."""
COUNTS_Y = 48
LINE_H = 12
MIN_COUNT_LINES = 2
MIN_SHARE_W = 3
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

    @property
    def shares(self) -> tuple[tuple[int, int, str], ...]:
        """A collapsed layer's states as (x, width, state) segments tiling a bar NODE_W - 16
        wide, in proportion to their counts; a state present is at least MIN_SHARE_W wide (the
        largest gives up the room), so one failure among 9,998 still shows."""
        return shares_of(self.counts, NODE_W - 16)


def shares_of(counts: Sequence[tuple[str, int]], width: int) -> tuple[tuple[int, int, str], ...]:
    total = sum(n for _, n in counts)
    widths = [max(MIN_SHARE_W, round(n * width / total)) for _, n in counts]
    if widths:
        largest = max(range(len(widths)), key=lambda i: counts[i][1])
        widths[largest] = width - sum(widths) + widths[largest]
    segments, x = [], 8
    for (state, _), w in zip(counts, widths, strict=True):
        segments.append((x, w, state))
        x += w
    return tuple(segments)


@dataclass(frozen=True, slots=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    via: tuple[tuple[int, int], ...] = ()
    """Bends between the ends (around a wrapped layer's block)."""

    @property
    def points(self) -> str:
        """The SVG polyline's points."""
        return " ".join(f"{x},{y}" for x, y in ((self.x1, self.y1), *self.via,
                                                (self.x2, self.y2)))


@dataclass(frozen=True, slots=True)
class Block:
    """Where a layer is drawn: x from `left` to `right`, in `columns` sub-columns."""
    left: int
    right: int
    columns: int


@dataclass(frozen=True, slots=True)
class Drawing:
    width: int
    height: int
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    collapsed: bool
    group_h: int = 0
    """A collapsed layer's node height: room for the most states any layer has (the page grows
    it if a live update brings more)."""


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


def draw(tasks: Sequence[TaskNode], max_nodes: int = limits.WEB_GRAPH_MAX_NODES,
         max_rows: int = limits.WEB_GRAPH_LAYER_MAX_ROWS,
         wrap_columns: int = limits.WEB_GRAPH_WRAP_COLUMNS) -> Drawing:
    layers = layers_of(tasks)
    if len(tasks) > max_nodes:
        return _collapsed(layers, {t.task_id: t.state for t in tasks})
    ordered = _order(layers, tasks)
    states = {t.task_id: t.state for t in tasks}
    blocks = [_block(len(layer), max_rows, wrap_columns) for layer in ordered]
    blocks = _side_by_side(blocks)
    where: dict[str, tuple[int, int, int]] = {}  # task -> x, y, layer
    boxes = []
    for column, (layer, block) in enumerate(zip(ordered, blocks, strict=True)):
        for index, task_id in enumerate(layer):
            row, sub = divmod(index, block.columns)
            x, y = block.left + sub * (NODE_W + WRAP_GAP_X), MARGIN + row * (NODE_H + GAP_Y)
            where[task_id] = (x, y, column)
            boxes.append(Box(x, y, task_id, states[task_id], task_id=task_id))
    edges = [_edge(where[d], where[t.task_id], blocks)
             for t in tasks for d in t.depends_on if d in where]
    rows = max((-(-len(layer) // block.columns) for layer, block in zip(ordered, blocks,
                                                                         strict=True)), default=0)
    width = (blocks[-1].right if blocks else 0) + MARGIN
    return Drawing(max(width, 2 * MARGIN + NODE_W), _extent(rows, NODE_H + GAP_Y),
                   tuple(boxes), tuple(edges), collapsed=False)


def _block(size: int, max_rows: int, wrap_columns: int) -> Block:
    """A layer's sub-columns: one up to `max_rows` tasks, else enough for `max_rows` rows, at
    most `wrap_columns` (then the rows grow)."""
    columns = 1 if size <= max_rows else min(-(-size // max_rows), wrap_columns)
    return Block(0, columns * NODE_W + (columns - 1) * WRAP_GAP_X, columns)


def _side_by_side(blocks: list[Block]) -> list[Block]:
    placed, x = [], MARGIN
    for block in blocks:
        placed.append(Block(x, x + block.right, block.columns))
        x += block.right + GAP_X
    return placed


def _edge(source: tuple[int, int, int], target: tuple[int, int, int],
          blocks: list[Block]) -> Edge:
    """From the source's right side to the target's left side. Around a wrapped block the edge
    runs orthogonally along a bus beside the block (vertical at `ROUTE_X` from its side), then
    along the node's row: a fan-out into 2,000 nodes draws one trunk, not a dark wedge."""
    x1, y1, x2, y2 = source[0] + NODE_W, source[1] + NODE_H // 2, target[0], target[1] + NODE_H // 2
    via: list[tuple[int, int]] = []
    if blocks[source[2]].columns > 1:
        bus = blocks[source[2]].right + ROUTE_X
        via += [(bus, y1), (bus, y2)]
    if blocks[target[2]].columns > 1 and not via:  # (after a source's bus: already on y2)
        bus = blocks[target[2]].left - ROUTE_X
        via += [(bus, y1), (bus, y2)]
    return Edge(x1, y1, x2, y2, tuple(via))


def _collapsed(layers: list[list[str]], states: dict[str, str]) -> Drawing:
    boxes = []
    for column, (layer, (worst, counts)) in enumerate(zip(layers, group_counts(layers, states),
                                                          strict=True)):
        boxes.append(Box(MARGIN + column * (NODE_W + GAP_X), MARGIN,
                         _layer_label(column, len(layer)), worst, counts=counts))
    edges = [Edge(a.x + NODE_W, a.y + NODE_H // 2, b.x, b.y + NODE_H // 2)
             for a, b in itertools.pairwise(boxes)]
    lines = max([MIN_COUNT_LINES, *(len(b.counts) for b in boxes)])
    group_h = group_height(lines)
    return Drawing(_extent(len(layers), NODE_W + GAP_X), _extent(1, group_h),
                   tuple(boxes), tuple(edges), collapsed=True, group_h=group_h)


def group_height(lines: int) -> int:
    return COUNTS_Y + LINE_H * (lines - 1) + 8


def group_counts(layers: list[list[str]],
                 states: dict[str, str]) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    """Per layer: its colour (most telling state) and its counts per state, by state name.
    O(tasks): a live collapsed page recounts with it at every change."""
    result = []
    for layer in layers:
        counts = Counter(states.get(t, TaskStateName.PENDING) for t in layer)
        result.append((_dominant(counts), tuple(sorted(counts.items()))))
    return result


_ATTENTION = (TaskStateName.FAILED, TaskStateName.RUNNING, TASK_QUEUED_AT_AGENT,
              TaskStateName.ASSIGNED,
              TaskStateName.RETRY_WAIT, TaskStateName.RUNNABLE, TaskStateName.PENDING)


def _dominant(counts: Counter[str]) -> str:
    """A group's colour: its most telling state present (failed first, then running, ...)."""
    for state in _ATTENTION:
        if counts.get(state):
            return state
    return counts.most_common(1)[0][0] if counts else TaskStateName.PENDING


def _extent(count: int, step: int) -> int:
    return 2 * MARGIN + max(count, 1) * step


def _layer_label(column: int, count: int) -> str:
    return f"layer {column + 1}: {count} task{'' if count == 1 else 's'}"
