"""The console's DAG layout (raftsched/web/layout.py): longest-path layers, barycenter order,
collapse above the node bound."""

from __future__ import annotations

from raftsched.web import layout
from raftsched.web.layout import TaskNode


def _t(task_id: str, *deps: str, state: str = "PENDING") -> TaskNode:
    return TaskNode(task_id, state, deps)


def test_layers_are_longest_paths() -> None:
    tasks = [_t("d", "b", "c"), _t("a"), _t("b", "a"), _t("c", "a", "b")]
    assert layout.layers_of(tasks) == [["a"], ["b"], ["c"], ["d"]]


def test_unknown_dependencies_are_ignored_and_roots_share_layer_zero() -> None:
    assert layout.layers_of([_t("x", "gone"), _t("y")]) == [["x", "y"]]


def test_every_task_is_a_box_and_every_edge_is_drawn() -> None:
    tasks = [_t("a", state="SUCCEEDED"), _t("b", "a", state="RUNNING"), _t("c", "a")]
    drawing = layout.draw(tasks)
    assert not drawing.collapsed
    assert {(b.task_id, b.state) for b in drawing.boxes} == {
        ("a", "SUCCEEDED"), ("b", "RUNNING"), ("c", "PENDING")}
    assert len(drawing.edges) == 2
    assert all(e.x2 > e.x1 for e in drawing.edges)  # left to right


def test_barycenter_uncrosses_a_swapped_fan() -> None:
    # Layer 0: p, q; layer 1 listed crossed (child of q first): the sweep puts p's child first.
    tasks = [_t("p"), _t("q"), _t("cq", "q"), _t("cp", "p")]
    drawing = layout.draw(tasks)
    y = {b.task_id: b.y for b in drawing.boxes}
    assert (y["p"] < y["q"]) == (y["cp"] < y["cq"])


def test_above_the_bound_layers_collapse_into_counted_groups() -> None:
    tasks = [_t("root", state="SUCCEEDED")] + [
        _t(f"t{i}", "root", state="FAILED" if i == 7 else "RUNNING") for i in range(20)]
    drawing = layout.draw(tasks, max_nodes=10)
    assert drawing.collapsed
    assert len(drawing.boxes) == 2 and len(drawing.edges) == 1
    second = drawing.boxes[1]
    assert dict(second.counts) == {"FAILED": 1, "RUNNING": 19}
    assert second.state == "FAILED"  # the group shows its most telling state


def test_a_deep_chain_lays_out_without_recursion() -> None:
    tasks = [_t("n0")] + [_t(f"n{i}", f"n{i - 1}") for i in range(1, 5000)]
    assert len(layout.layers_of(tasks)) == 5000
