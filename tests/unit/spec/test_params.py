"""Job parameters (`params:`): validation, canonical strings, overrides, identity, wire form."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from raftsched import limits
from raftsched.spec import wire as spec_wire
from raftsched.spec.model import SpecError
from raftsched.spec.params import parse_assignments, spec_with_params, with_params
from raftsched.spec.validation import validate_job_doc

BASE: dict[str, Any] = {"name": "p", "tasks": [{"id": "a", "command": ["true"]}]}


def doc(**params: object) -> dict[str, Any]:
    return {**BASE, "params": params}


def refusal(document: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate_job_doc(document)
    return [issue.render() for issue in caught.value.issues]


def test_defaults_become_canonical_strings_sorted_by_name() -> None:
    spec = validate_job_doc(doc(z="text", n=42, f=0.1, big=1e20, t=True, no=False, e=""))
    assert spec.params == (("big", "1e+20"), ("e", ""), ("f", "0.1"), ("n", "42"),
                           ("no", "false"), ("t", "true"), ("z", "text"))


@pytest.mark.parametrize(("params", "expected"), [
    ({"1x": "v"}, "params: a param name must match [A-Za-z_][A-Za-z0-9_]*, got '1x'"),
    ({"a-b": "v"}, "params: a param name must match [A-Za-z_][A-Za-z0-9_]*, got 'a-b'"),
    ({"x" * 65: "v"}, "params: a param name must be at most 64 characters, got 65"),
    ({"date": None}, "params.date: required (no default): give it with --param date=VALUE"),
    ({"l": [1]}, "params.l: a default must be a string, an integer, a float, a bool or null "
                 "(required), got [1]"),
    ({"m": {"a": 1}}, "params.m: a default must be a string"),
    ({"v": "x" * 4097}, "params.v: must be at most 4096 UTF-8 bytes, got 4097"),
    ({"v": "é" * 2049}, "params.v: must be at most 4096 UTF-8 bytes, got 4098"),
    ({"v": "a\x00"}, "params.v: must not contain NUL characters"),
    ({"v": float("nan")}, "params.v: a default must be a string"),
    ({"v": 10**5000}, "params.v: must be at most 4096 UTF-8 bytes, got an integer of 16610 bits"),
    ({"v": 10**4096}, "params.v: must be at most 4096 UTF-8 bytes, got 4097"),
])
def test_bad_params_are_refused_naming_the_field(params: dict[str, object], expected: str) -> None:
    assert refusal(doc(**params))[0].startswith(expected)


def test_too_many_params_and_a_params_that_is_no_mapping() -> None:
    many = {f"p{i}": "v" for i in range(limits.MAX_PARAMS_PER_JOB + 1)}
    assert refusal(doc(**many)) == ["params: at most 64 params, got 65"]
    assert validate_job_doc(doc(**dict(list(many.items())[:64]))).params[0] == ("p0", "v")
    assert refusal({**BASE, "params": ["a"]})[0].startswith("params: must be a mapping")


def test_no_params_leaves_the_document_and_digest_as_they_were() -> None:
    spec = validate_job_doc(BASE)
    assert "params" not in spec.to_doc()
    assert validate_job_doc({**BASE, "params": {}}).digest() == spec.digest()
    assert spec_wire.to_wire(spec)[0] == 2 and len(spec_wire.to_wire(spec)) == 13


def test_params_are_part_of_the_identity() -> None:
    one = validate_job_doc(with_params(doc(d="x"), {"d": "1"}))
    two = validate_job_doc(with_params(doc(d="x"), {"d": "2"}))
    assert one.params == (("d", "1"),) and one.digest() != two.digest()
    assert one.to_doc()["params"] == {"d": "1"}
    assert validate_job_doc(one.to_doc()) == one


def test_with_params_overrides_and_fills_required_ones() -> None:
    original = doc(date=None, n=1)
    given = with_params(original, {"date": "2026-12-05", "n": ""})
    assert validate_job_doc(given).params == (("date", "2026-12-05"), ("n", ""))
    assert original["params"] == {"date": None, "n": 1}  # not changed in place
    assert with_params(original, {}) is original


def test_with_params_refuses_an_unknown_name_or_a_bad_value() -> None:
    with pytest.raises(SpecError) as caught:
        with_params(doc(a=1, b=2), {"nope": "x"})
    assert str(caught.value) == "--param nope: the job has no param 'nope' (it has: a, b)"
    with pytest.raises(SpecError) as caught:
        with_params(BASE, {"nope": "x"})
    assert str(caught.value) == "--param nope: the job has no param 'nope' (it has: none)"
    with pytest.raises(SpecError) as caught:
        with_params(doc(a=1), {"a": "x" * 4097})
    assert str(caught.value) == "--param a: must be at most 4096 UTF-8 bytes, got 4097"


def test_spec_with_params_on_a_validated_spec() -> None:
    spec = validate_job_doc(doc(a=1, b="x"))
    changed = spec_with_params(spec, {"b": "y"})
    assert changed.params == (("a", "1"), ("b", "y")) and spec.params == (("a", "1"), ("b", "x"))
    assert spec_with_params(spec, {}) is spec
    with pytest.raises(SpecError, match="the job has no param 'c' \\(it has: a, b\\)"):
        spec_with_params(spec, {"c": "1"})


def test_parse_assignments() -> None:
    assert parse_assignments(["a=1", "b=", "c=x=y"]) == {"a": "1", "b": "", "c": "x=y"}
    for bad, message in [("a", "expected NAME=VALUE"), ("1=2", "a param name must match"),
                         ("=x", "a param name must match")]:
        with pytest.raises(ValueError, match=message):
            parse_assignments([bad])
    with pytest.raises(ValueError, match="--param a: given twice"):
        parse_assignments(["a=1", "a=2"])


def test_wire_v4_round_trips_and_older_versions_still_read() -> None:
    spec = validate_job_doc(doc(b="é", a=3))
    wire = msgpack.unpackb(spec_wire.pack_wire(spec))
    assert wire[0] == 4 and len(wire) == 14 and wire[13] == [["a", "3"], ["b", "é"]]
    assert spec_wire.decode_wire(spec_wire.pack_wire(spec)) == spec
    assert spec_wire.decode_trusted(wire) == spec
    assert spec_wire.from_trusted_wire(wire) == spec
    assert validate_job_doc(spec_wire.wire_to_doc(wire)) == spec
    custom = {**BASE, "tasks": [{"id": "a", "command": ["true"],
                                 "resources": {"custom": {"lic": 1}}}]}
    for plain in (validate_job_doc(BASE), validate_job_doc(custom)):
        old = msgpack.unpackb(spec_wire.pack_wire(plain))
        assert old[0] in (2, 3) and len(old) == 13
        assert spec_wire.decode_trusted(old) == plain and plain.params == ()
        assert spec_wire.decode_wire(spec_wire.pack_wire(plain)) == plain


@pytest.mark.parametrize("params", [
    [["b", "1"], ["a", "1"]], [["a", "1"], ["a", "2"]], [["a", 1]],
    [["a", "x" * 5000]], "nope", [["a"]], [["a", None]],
])
def test_decode_trusted_refuses_malformed_params(params: object) -> None:
    wire = spec_wire.to_wire(validate_job_doc(doc(a="1")))
    wire[13] = params
    try:
        spec = spec_wire.decode_trusted(wire)
    except SpecError:
        return
    # what it accepts is what the full validator makes of the same document
    assert spec == validate_job_doc(spec_wire.wire_to_doc(wire))
    assert list(spec.params) == sorted(set(spec.params))
