"""Graph checks (raftsched.spec.dag): ids, dependencies, cycles and topological order."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftsched import limits
from raftsched.spec.dag import check_graph, topological_order
from raftsched.spec.issue import SpecIssue


def graph(edges: dict[str, list[str]]) -> tuple[list[str], list[list[str]]]:
    """ids in insertion order and each one's depends_on."""
    return list(edges), list(edges.values())


def only_issue(edges: dict[str, list[str]]) -> SpecIssue:
    [issue] = check_graph(*graph(edges))
    return issue


# --- valid shapes ---------------------------------------------------------------------------------


def test_diamond() -> None:
    ids, deps = graph({"top": [], "left": ["top"], "right": ["top"], "bottom": ["left", "right"]})
    assert check_graph(ids, deps) == []
    assert topological_order(ids, deps) == [0, 1, 2, 3]


def test_fan_out_and_fan_in() -> None:
    fan_out = {"root": [], **{f"leaf{i}": ["root"] for i in range(50)}}
    assert check_graph(*graph(fan_out)) == []
    assert topological_order(*graph(fan_out))[0] == 0
    fan_in = {**{f"src{i}": [] for i in range(50)}, "sink": [f"src{i}" for i in range(50)]}
    assert check_graph(*graph(fan_in)) == []
    assert topological_order(*graph(fan_in)) == list(range(51))


def test_order_puts_dependencies_first_and_keeps_spec_order_for_ties() -> None:
    assert topological_order(*graph({"c": [], "b": [], "a": []})) == [0, 1, 2]
    assert topological_order(*graph({"late": ["early"], "early": [], "other": []})) == [1, 2, 0]


def test_empty_graph() -> None:
    assert check_graph([], []) == []
    assert topological_order([], []) == []


def test_mismatched_lengths_are_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        check_graph(["a"], [])


def test_order_of_an_invalid_graph_raises() -> None:
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        topological_order(*graph({"a": ["b"], "b": ["a"]}))


# --- ids and dependencies -------------------------------------------------------------------------


def test_duplicate_ids_name_the_first_index() -> None:
    issues = check_graph(["a", "b", "a", "a"], [[], [], [], []])
    assert issues == [
        SpecIssue("tasks[2].id", "duplicate task id 'a' (first used by tasks[0])", "a"),
        SpecIssue("tasks[3].id", "duplicate task id 'a' (first used by tasks[0])", "a"),
    ]


def test_unknown_dependency() -> None:
    issue = only_issue({"a": [], "b": ["a", "ghost"]})
    assert issue == SpecIssue("tasks[1].depends_on[1]", "unknown dependency 'ghost'", "b")


def test_self_dependency() -> None:
    issue = only_issue({"a": [], "b": ["a", "b"]})
    assert issue == SpecIssue("tasks[1].depends_on[1]", "task depends on itself", "b")


def test_self_and_unknown_dependencies_stay_out_of_the_cycle_search() -> None:
    issues = check_graph(*graph({"a": ["a", "x"], "b": ["a", "b"]}))
    assert [issue.message for issue in issues] == [
        "task depends on itself",
        "unknown dependency 'x'",
        "task depends on itself",
    ]


# --- cycles ---------------------------------------------------------------------------------------


def test_cycle_is_named_in_dependency_order() -> None:
    issue = only_issue({"a": ["b"], "b": ["c"], "c": ["a"]})
    assert issue == SpecIssue("tasks[0].depends_on", "cycle: a -> b -> c -> a", "a")


@pytest.mark.parametrize(
    ("edges", "message", "path"),
    [
        ({"c": ["a"], "a": ["b"], "b": ["c"]}, "cycle: c -> a -> b -> c", "tasks[0].depends_on"),
        ({"b": ["c"], "c": ["a"], "a": ["b"]}, "cycle: b -> c -> a -> b", "tasks[0].depends_on"),
        ({"x": [], "q": ["p"], "p": ["q"]}, "cycle: q -> p -> q", "tasks[1].depends_on"),
    ],
)
def test_cycle_starts_at_its_task_with_the_smallest_index(
    edges: dict[str, list[str]], message: str, path: str
) -> None:
    issue = only_issue(edges)
    assert (issue.path, issue.message) == (path, message)


def test_tasks_behind_a_cycle_are_not_part_of_it() -> None:
    issue = only_issue({"after": ["a"], "a": ["b"], "b": ["a"], "also_after": ["after"]})
    assert issue == SpecIssue("tasks[1].depends_on", "cycle: a -> b -> a", "a")


def test_shortest_cycle_through_the_first_task_is_named() -> None:
    issue = only_issue({"a": ["b", "e"], "b": ["c"], "c": ["d"], "d": ["a"], "e": ["a"]})
    assert issue.message == "cycle: a -> e -> a"


def test_each_task_is_in_at_most_one_reported_cycle() -> None:
    issues = check_graph(*graph({"hub": ["x", "y"], "x": ["hub"], "y": ["hub"]}))
    assert [issue.message for issue in issues] == ["cycle: hub -> x -> hub"]


def test_disjoint_cycles_are_all_reported() -> None:
    edges = {"a": ["b", "c"], "b": ["a"], "c": ["d"], "d": ["c"], "e": ["f"], "f": ["e"]}
    assert [issue.message for issue in check_graph(*graph(edges))] == [
        "cycle: a -> b -> a",
        "cycle: c -> d -> c",  # reachable from the first cycle, still reported
        "cycle: e -> f -> e",
    ]


def test_cycle_depending_on_an_earlier_cycle_is_reported_too() -> None:
    edges = {"a": ["b"], "b": ["a"], "c": ["d", "a"], "d": ["c"], "e": ["c"]}
    assert [issue.message for issue in check_graph(*graph(edges))] == [
        "cycle: a -> b -> a",
        "cycle: c -> d -> c",
    ]


def test_reported_cycles_are_bounded() -> None:
    edges: dict[str, list[str]] = {}
    for i in range(limits.MAX_REPORTED_CYCLES + 2):
        edges[f"a{i}"] = [f"b{i}"]
        edges[f"b{i}"] = [f"a{i}"]
    issues = check_graph(*graph(edges))
    assert len(issues) == limits.MAX_REPORTED_CYCLES + 1
    assert issues[-1] == SpecIssue("tasks", "2 more cycle(s) not shown (at most 10 are)")
    assert issues[-2].message == "cycle: a9 -> b9 -> a9"


def test_cycle_bound_is_read_from_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_REPORTED_CYCLES", 1)
    issues = check_graph(*graph({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c"]}))
    assert [issue.message for issue in issues] == [
        "cycle: a -> b -> a",
        "1 more cycle(s) not shown (at most 1 are)",
    ]


# --- 100,000 tasks: no recursion anywhere ---------------------------------------------------------

COUNT = 100_000


def test_long_chain() -> None:
    ids = [f"t{i}" for i in range(COUNT)]
    deps = [[f"t{i - 1}"] if i else [] for i in range(COUNT)]
    assert check_graph(ids, deps) == []
    assert topological_order(ids, deps) == list(range(COUNT))
    backwards = [[f"t{i + 1}"] if i < COUNT - 1 else [] for i in range(COUNT)]
    assert topological_order(ids, backwards) == list(reversed(range(COUNT)))


def test_long_cycle() -> None:
    ids = [f"t{i}" for i in range(COUNT)]
    deps = [[f"t{(i - 1) % COUNT}"] for i in range(COUNT)]
    [issue] = check_graph(ids, deps)
    assert (issue.path, issue.task) == ("tasks[0].depends_on", "t0")
    names = issue.message.removeprefix("cycle: ").split(" -> ")
    assert names == ["t0", *(f"t{i}" for i in range(COUNT - 1, 0, -1)), "t0"]


# --- properties on small random graphs ------------------------------------------------------------


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    size = draw(st.integers(0, 8))
    ids = [f"n{i}" for i in range(size)]
    names = st.sampled_from([*ids, "ghost"]) if ids else st.just("ghost")
    deps = [draw(st.lists(names, max_size=3, unique=True)) for _ in ids]
    return ids, deps


def reaches(deps_of: list[set[int]], start: int) -> set[int]:
    seen: set[int] = set()
    todo = list(deps_of[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(deps_of[node])
    return seen


@settings(max_examples=500)
@given(random_graphs())
def test_reported_cycles_are_real_disjoint_and_cover_every_cyclic_component(
    g: tuple[list[str], list[list[str]]],
) -> None:
    ids, deps = g
    index = {name: i for i, name in enumerate(ids)}
    deps_of = [{index[d] for d in names if d in index and d != ids[i]} for i, names in
               enumerate(deps)]
    reach = [reaches(deps_of, i) for i in range(len(ids))]
    cyclic = {i for i in range(len(ids)) if i in reach[i]}
    components = {frozenset(j for j in cyclic if j in reach[i] and i in reach[j]) for i in cyclic}
    cycles = [issue for issue in check_graph(ids, deps) if issue.message.startswith("cycle: ")]
    covered: set[int] = set()
    for issue in cycles:
        walk = [index[name] for name in issue.message.removeprefix("cycle: ").split(" -> ")]
        assert walk[0] == walk[-1] == min(walk)
        assert issue.path == f"tasks[{walk[0]}].depends_on" and issue.task == ids[walk[0]]
        assert all(b in deps_of[a] for a, b in itertools.pairwise(walk))
        assert covered.isdisjoint(walk)
        covered.update(walk)
    assert len(cycles) == len(components)
    if not cyclic:
        order = topological_order(ids, [[d for d in names if d in index and d != ids[i]]
                                        for i, names in enumerate(deps)])
        assert sorted(order) == list(range(len(ids)))
        position = {node: k for k, node in enumerate(order)}
        assert all(position[d] < position[i] for i in range(len(ids)) for d in deps_of[i])
