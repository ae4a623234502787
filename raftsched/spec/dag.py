"""Checks on a job's dependency graph, in O(V+E) and without recursion.

Pure: no I/O. Tasks are numbered by their index in the spec; an edge goes from a task to a task it
depends on, so a cycle reported as `a -> b -> c -> a` reads "a depends on b, b depends on c, c
depends on a". A reported cycle starts (and ends) at its task with the smallest index.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from raftsched import limits
from raftsched.spec.issue import SpecIssue, show


def check_graph(ids: Sequence[str], deps: Sequence[Sequence[str]]) -> list[SpecIssue]:
    """Every graph problem of a job whose task i has id `ids[i]` and depends on `deps[i]`.

    Reports duplicate ids, unknown dependencies, self-dependencies and cycles. Unknown and self
    dependencies are left out of the cycle search; each task appears in at most one reported
    cycle, and at most `limits.MAX_REPORTED_CYCLES` cycles are named.
    """
    if len(ids) != len(deps):
        raise ValueError(f"{len(ids)} ids but {len(deps)} dependency lists")
    issues: list[SpecIssue] = []
    deps_of = _resolve(ids, deps, issues)
    _, waiting = _kahn(deps_of)
    alive = [count > 0 for count in waiting]
    if any(alive):
        issues.extend(_cycle_issues(ids, deps_of, alive))
    return issues


def topological_order(ids: Sequence[str], deps: Sequence[Sequence[str]]) -> list[int]:
    """Task indices, each after everything it depends on; ties keep spec order.

    For a graph that `check_graph` accepts; raises ValueError otherwise.
    """
    issues = check_graph(ids, deps)
    if issues:
        raise ValueError(f"not a valid graph: {issues[0].render()}")
    order, _ = _kahn(_resolve(ids, deps, []))
    return order


def _resolve(
    ids: Sequence[str], deps: Sequence[Sequence[str]], issues: list[SpecIssue]
) -> list[list[int]]:
    """deps_of[i]: indices task i depends on. Unknown and self dependencies become issues."""
    index = _index_ids(ids, issues)
    deps_of: list[list[int]] = []
    for i, names in enumerate(deps):
        resolved: list[int] = []
        for k, name in enumerate(names):
            where = f"tasks[{i}].depends_on[{k}]"
            target = index.get(name)
            if name == ids[i]:
                issues.append(SpecIssue(where, "task depends on itself", ids[i]))
            elif target is None:
                issues.append(SpecIssue(where, f"unknown dependency {show(name)}", ids[i]))
            else:
                resolved.append(target)
        deps_of.append(resolved)
    return deps_of


def _index_ids(ids: Sequence[str], issues: list[SpecIssue]) -> dict[str, int]:
    """id -> index of its first task; later tasks with the same id become issues."""
    index: dict[str, int] = {}
    for i, task_id in enumerate(ids):
        first = index.setdefault(task_id, i)
        if first != i:
            message = f"duplicate task id {show(task_id)} (first used by tasks[{first}])"
            issues.append(SpecIssue(f"tasks[{i}].id", message, task_id))
    return index


def _kahn(deps_of: list[list[int]]) -> tuple[list[int], list[int]]:
    """Kahn's algorithm: (order, waiting); waiting[i] > 0 for tasks on or behind a cycle."""
    waiting = [len(targets) for targets in deps_of]
    dependents: list[list[int]] = [[] for _ in deps_of]
    for i, targets in enumerate(deps_of):
        for target in targets:
            dependents[target].append(i)
    ready = deque(i for i, count in enumerate(waiting) if count == 0)
    order: list[int] = []
    while ready:
        done = ready.popleft()
        order.append(done)
        for dependent in dependents[done]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    return order, waiting


def _cycle_issues(
    ids: Sequence[str], deps_of: list[list[int]], alive: list[bool]
) -> list[SpecIssue]:
    """One issue per strongly connected component (of 2+ tasks) among the tasks Kahn left."""
    component = _strong_components(deps_of, alive)
    sizes: dict[int, int] = {}
    for c in component:
        if c >= 0:
            sizes[c] = sizes.get(c, 0) + 1
    issues: list[SpecIssue] = []
    seen: set[int] = set()
    for start, c in enumerate(component):  # index order: `start` is its component's smallest
        if c < 0 or sizes[c] < 2 or c in seen:
            continue
        seen.add(c)
        if len(issues) < limits.MAX_REPORTED_CYCLES:
            cycle = " -> ".join(ids[i] for i in _cycle_through(start, deps_of, component))
            issues.append(SpecIssue(f"tasks[{start}].depends_on", f"cycle: {cycle}", ids[start]))
    hidden = len(seen) - len(issues)
    if hidden > 0:
        message = f"{hidden} more cycle(s) not shown (at most {limits.MAX_REPORTED_CYCLES} are)"
        issues.append(SpecIssue("tasks", message))
    return issues


def _cycle_through(start: int, deps_of: list[list[int]], component: list[int]) -> list[int]:
    """Shortest cycle from `start` back to itself inside its component (breadth-first)."""
    home = component[start]
    parent = {start: start}
    frontier = deque([start])
    while frontier:
        node = frontier.popleft()
        for target in deps_of[node]:
            if target == start:
                return _walk_back(parent, node, start)
            if component[target] == home and target not in parent:
                parent[target] = node
                frontier.append(target)
    raise AssertionError("every task of a strong component lies on a cycle")


def _walk_back(parent: dict[int, int], last: int, start: int) -> list[int]:
    path = [last]
    while path[-1] != start:
        path.append(parent[path[-1]])
    path.reverse()
    path.append(start)
    return path


def _strong_components(deps_of: list[list[int]], alive: list[bool]) -> list[int]:
    """Tarjan's algorithm with an explicit stack: component[i] >= 0 for alive tasks, else -1."""
    tarjan = _Tarjan(deps_of, alive)
    for root in range(len(deps_of)):
        if alive[root] and tarjan.order[root] < 0:
            tarjan.run(root)
    return tarjan.component


class _Tarjan:
    """State of one iterative Tarjan run; each task is entered once, each edge looked at once."""

    def __init__(self, deps_of: list[list[int]], alive: list[bool]) -> None:
        size = len(deps_of)
        self.deps_of = deps_of
        self.alive = alive
        self.order = [-1] * size
        self.low = [0] * size
        self.component = [-1] * size
        self.on_stack = [False] * size
        self.stack: list[int] = []
        self.visited = 0
        self.found = 0

    def run(self, root: int) -> None:
        self._enter(root)
        work = [(root, 0)]  # (task, next edge to look at): the DFS stack, no recursion
        while work:
            node, edge = work[-1]
            child = self._next_child(node, edge, work)
            if child >= 0:
                self._enter(child)
                work.append((child, 0))
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                self.low[parent] = min(self.low[parent], self.low[node])
            if self.low[node] == self.order[node]:
                self._pop_component(node)

    def _next_child(self, node: int, edge: int, work: list[tuple[int, int]]) -> int:
        """The next unvisited alive target of `node` (saving the position), or -1 when done."""
        targets = self.deps_of[node]
        while edge < len(targets):
            target = targets[edge]
            edge += 1
            if not self.alive[target]:
                continue
            if self.order[target] < 0:
                work[-1] = (node, edge)
                return target
            if self.on_stack[target]:
                self.low[node] = min(self.low[node], self.order[target])
        return -1

    def _enter(self, node: int) -> None:
        self.order[node] = self.low[node] = self.visited
        self.visited += 1
        self.stack.append(node)
        self.on_stack[node] = True

    def _pop_component(self, root: int) -> None:
        while True:
            member = self.stack.pop()
            self.on_stack[member] = False
            self.component[member] = self.found
            if member == root:
                break
        self.found += 1
