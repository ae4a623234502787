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
    assert second.shares == ((8, 7, "FAILED"), (15, 127, "RUNNING"))  # tiles NODE_W - 16
    one_in_many = layout.shares_of((("FAILED", 1), ("RUNNABLE", 9_998), ("SUCCEEDED", 1)), 134)
    assert one_in_many == ((8, 3, "FAILED"), (11, 128, "RUNNABLE"), (139, 3, "SUCCEEDED"))
    assert drawing.group_h == layout.group_height(2)


def test_a_deep_chain_lays_out_without_recursion() -> None:
    tasks = [_t("n0")] + [_t(f"n{i}", f"n{i - 1}") for i in range(1, 5000)]
    assert len(layout.layers_of(tasks)) == 5000


def test_a_wide_layer_wraps_into_a_bounded_block_and_keeps_every_node_and_edge() -> None:
    tasks = [_t("root")] + [_t(f"t{i}", "root") for i in range(2_000)] + [
        _t("sink", *(f"t{i}" for i in range(2_000)))]
    drawing = layout.draw(tasks, max_nodes=5_000, max_rows=25, wrap_columns=5)
    assert len(drawing.boxes) == 2_002 and len(drawing.edges) == 4_000
    columns = {b.x for b in drawing.boxes if b.task_id.startswith("t")}
    assert len(columns) == 5  # five sub-columns, 400 rows
    assert drawing.height == 2 * layout.MARGIN + 400 * (layout.NODE_H + layout.GAP_Y)
    # root, the block of five, sink: about a browser window's width (was 3 columns + 80,000 px)
    assert drawing.width == 2 * layout.MARGIN + 2 * (layout.NODE_W + layout.GAP_X) + \
        5 * layout.NODE_W + 4 * layout.WRAP_GAP_X
    assert drawing.width < 1_280
    boxes = {b.task_id: b for b in drawing.boxes}
    assert len({(b.x, b.y) for b in drawing.boxes}) == 2_002  # no two nodes on one spot
    block_left = min(columns)
    t3_y = boxes["t3"].y + layout.NODE_H // 2
    into = next(e for e in drawing.edges if (e.x2, e.y2) == (boxes["t3"].x, t3_y))
    # into the block: along the bus left of it, down to the node's row, then along the row
    bus = block_left - layout.ROUTE_X
    assert into.via == ((bus, into.y1), (bus, t3_y))


def test_a_layer_within_the_bound_is_one_column() -> None:
    tasks = [_t("root")] + [_t(f"t{i}", "root") for i in range(25)]
    drawing = layout.draw(tasks, max_rows=25)
    assert len({b.x for b in drawing.boxes if b.task_id != "root"}) == 1
    assert all(not e.via for e in drawing.edges)
    assert drawing.edges[0].points.count(",") == 2  # a straight line: two points


def test_group_counts_give_each_layer_its_colour_and_counts() -> None:
    layers = [["a"], ["b", "c", "d"]]
    states = {"a": "SUCCEEDED", "b": "RUNNING", "c": "SUCCEEDED", "d": "SUCCEEDED"}
    assert layout.group_counts(layers, states) == [
        ("SUCCEEDED", (("SUCCEEDED", 1),)),
        ("RUNNING", (("RUNNING", 1), ("SUCCEEDED", 2)))]


def test_an_edge_between_two_wrapped_layers_turns_at_the_first_bus_only() -> None:
    tasks = [_t(f"a{i}") for i in range(30)] + [_t(f"b{i}", f"a{i}") for i in range(30)]
    drawing = layout.draw(tasks, max_rows=10, wrap_columns=3)
    assert len({b.x for b in drawing.boxes}) == 6  # two blocks of three sub-columns
    first_right = max(b.x for b in drawing.boxes if b.task_id.startswith("a")) + layout.NODE_W
    for edge in drawing.edges:
        assert edge.via == ((first_right + layout.ROUTE_X, edge.y1),
                            (first_right + layout.ROUTE_X, edge.y2))
