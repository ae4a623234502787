"""Template references in task fields: the three forms parse, anything else is malformed."""

from __future__ import annotations

import pytest

from raftsched.spec.templates import (
    JobIdRef,
    OutputRef,
    ParamRef,
    TemplateError,
    references,
)


def test_the_three_forms_parse_in_order() -> None:
    text = "echo {{ tasks.a.outputs.count }} {{params.size}} {{ job.id }} {{ tasks.b.outputs.x.y }}"
    assert references(text) == [OutputRef("a", ("count",)), ParamRef("size"), JobIdRef(),
                                OutputRef("b", ("x", "y"))]


def test_text_without_templates_has_no_references() -> None:
    assert references("echo } { plain") == []


@pytest.mark.parametrize(("text", "words"), [
    ("{{ tasks.a.count }}", "is none of"),
    ("{{ params }}", "is none of"),
    ("{{ job.name }}", "is none of"),
    ("{{ params.no/slash }}", "param name must use only"),
    ("{{ tasks.a b.outputs.k }}", "task id must use only"),
    ("{{ tasks.a.outputs.k..j }}", "empty output key"),
    ("echo {{ params.x", "without its closing"),
    ("{{ params.x }} {{", "without its closing"),
])
def test_malformed_templates_say_why(text: str, words: str) -> None:
    outcome = references(text)
    assert isinstance(outcome, TemplateError)
    assert words in outcome.reason, outcome.reason
