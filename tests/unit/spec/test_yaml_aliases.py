"""YAML anchors and aliases in job specs (raftsched.spec.job): shared parts still work; a document
its aliases would expand past the bounds in raftsched.limits, or that contains itself, is refused
with a precise error before anything expanded is built."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
import yaml

from raftsched import limits
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import SpecError

BUILT_BYTES_MAX = 8 * 1024 * 1024
"""Python memory a refused bomb may take while it is parsed: its text's worth, not its
expansion's."""


def refused(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec_text(text, source="bomb.yaml")
    [issue] = caught.value.issues
    assert issue.path == ""
    return issue.message


def laughs(levels: int = 9) -> str:
    """The classic: `levels` levels of 9 aliases to the level below, 9**levels strings."""
    lines = ["name: laughs", 'x0: &x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join([*lines, f"tasks: [{{id: t, command: *x{levels - 1}}}]"])


def merge_bomb(levels: int) -> str:
    """Merge keys doubling a mapping `levels` times (PyYAML copies merged pairs, so building
    this takes 2**levels pairs)."""
    lines = ["name: merges", "m0: &m0 {k0: 1, j0: 2}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: 1}}" for i in range(1, levels)]
    return "\n".join([*lines, "tasks: []"])


def amplified(tasks: int, args: int = 1_000) -> str:
    """Valid: `tasks` tasks sharing one `args`-argument command through an alias."""
    command = ", ".join(f"arg-{i:05d}-{'x' * 36}" for i in range(args))
    lines = ["name: amplified", "tasks:", f"  - {{id: t0, command: &c [{command}]}}"]
    lines += [f"  - {{id: t{i}, command: *c}}" for i in range(1, tasks)]
    return "\n".join(lines)


def test_shared_parts_through_anchors_aliases_and_merge_keys_still_work() -> None:
    spec = parse_spec_text("""
name: shared
tasks:
  - id: a
    command: &cmd [sh, -c, "make && ls *.csv"]
    resources: &res {cpu: 1, memory_mb: 64}
    retry: &retry {max_attempts: 3}
  - {id: b, command: *cmd, resources: *res, retry: *retry, depends_on: [a]}
  - {id: c, command: *cmd, resources: {<<: *res, gpu: 1}}
""")
    a, b, c = spec.tasks
    assert a.command == b.command == c.command == ("sh", "-c", "make && ls *.csv")
    assert (b.retry.max_attempts, b.memory_mb, c.memory_mb, c.gpu) == (3, 64, 64, 1)


def test_a_generated_spec_sharing_parts_like_yaml_dump_writes_them_is_accepted() -> None:
    """yaml.dump writes an object shared by many tasks once, with an anchor, and aliases it."""
    resources = {"cpu": 0.5, "memory_mb": 256}
    retry = {"max_attempts": 3, "backoff_s": 2, "non_retryable_exit_codes": [2, 3]}
    command = ["python", "-m", "pipeline.step", "--config", "/etc/pipeline/config.yaml"]
    tasks = [{"id": f"t{i}", "command": command, "resources": resources, "retry": retry,
              "depends_on": [f"t{i - 1}"] if i else []} for i in range(2_000)]
    text = yaml.safe_dump({"name": "generated", "tasks": tasks})
    assert text.count("*id") > 5_000
    spec = parse_spec_text(text)
    assert len(spec.tasks) == 2_000 and spec.tasks[-1].retry.non_retryable_exit_codes == (2, 3)


def test_billion_laughs_is_refused_naming_the_expansion() -> None:
    message = refused(laughs())
    assert message.startswith("bomb.yaml: YAML aliases expand the document past "
                              f"{limits.MAX_SPEC_EXPANDED_CHARS} characters (the node at line ")


def test_billion_laughs_takes_no_more_memory_than_its_text() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SpecError):
            parse_spec_text(laughs(levels=12))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BUILT_BYTES_MAX


def test_merge_keys_that_double_a_mapping_over_and_over_are_refused_before_they_are_copied(
) -> None:
    tracemalloc.start()
    try:
        message = refused(merge_bomb(levels=18))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message.startswith("bomb.yaml: YAML aliases ")
    assert peak < BUILT_BYTES_MAX


def test_aliases_repeating_far_more_than_the_document_writes_out_are_refused() -> None:
    """60 KB repeated into 14 MB: under MAX_SPEC_EXPANDED_CHARS, but far past the allowance."""
    text = amplified(tasks=300)
    assert len(text) < 100_000
    message = refused(text)
    assert message.startswith("bomb.yaml: YAML aliases repeat ")
    assert f"they may repeat at most {limits.MAX_SPEC_ALIAS_CHARS} " in message
    assert f"{limits.MAX_SPEC_ALIAS_RATIO} times what is written out" in message


def test_aliases_repeating_less_than_the_allowance_are_accepted() -> None:
    """Ten tasks sharing a 1,000-argument command repeat about 430,000 characters."""
    spec = parse_spec_text(amplified(tasks=10))
    assert len(spec.tasks) == 10 and len(spec.tasks[9].command) == 1_000


@pytest.mark.parametrize("text", [
    pytest.param("name: r\ntasks: &t [*t]\n", id="list-in-itself"),
    pytest.param("name: r\ntasks:\n  - &t {id: a, command: [x], env: *t}\n", id="map-in-itself"),
])
def test_a_document_that_contains_itself_is_refused(text: str) -> None:
    message = refused(text)
    assert message.startswith("bomb.yaml: the YAML node at line ")
    assert message.endswith("contains an alias to itself (a recursive document)")


def test_a_document_without_aliases_is_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """No '&' anchor or no '*' alias in the text: the expansion walk is skipped."""
    from raftsched.spec import text as job

    def walked(*_: Any) -> list[Any]:
        raise AssertionError("walked")

    monkeypatch.setattr(job, "_child_nodes", walked)
    spec = parse_spec_text("name: plain\ntasks:\n  - {id: a, command: [sh, -c, 'a && b']}\n")
    assert spec.tasks[0].command == ("sh", "-c", "a && b")
    with pytest.raises(AssertionError, match="walked"):
        parse_spec_text("name: x\ntasks:\n  - {id: a, command: &c [sh]}\n  - {id: b, "
                        "command: *c}\n")
