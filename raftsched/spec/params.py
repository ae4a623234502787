"""Job parameters (`params:`): a spec's named string values with defaults, overridden at submit.

The user document maps NAME -> default: a string, an integer, a float or a bool, kept as its
canonical string (str(int), repr(float), "true"/"false"), or null for a param that must be given
at submit. A validated `JobSpec.params` holds the effective values (every param has one), sorted
by name; they are part of the job's identity (its digest). `with_params` applies overrides to a
user document before validation, `spec_with_params` to a validated spec (the wire path)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from raftsched import limits
from raftsched.spec.issue import SpecIssue, show
from raftsched.spec.model import JobSpec, SpecError

PARAM_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Params = tuple[tuple[str, str], ...]


def canonical(value: object) -> str | None:
    """A default's canonical string, or None when it is not a scalar (or null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value
    return None


def name_problem(name: object) -> str | None:
    """Why `name` is no valid param name, or None."""
    if not isinstance(name, str) or PARAM_NAME.fullmatch(name) is None:
        return f"a param name must match [A-Za-z_][A-Za-z0-9_]*, got {show(name)}"
    if len(name) > limits.MAX_PARAM_NAME_CHARS:
        return (f"a param name must be at most {limits.MAX_PARAM_NAME_CHARS} characters, "
                f"got {len(name)}")
    return None


def value_problem(value: str) -> str | None:
    """Why the string `value` cannot be a param's value, or None."""
    if "\x00" in value:
        return f"must not contain NUL characters, got {show(value)}"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"must be valid Unicode text, got {show(value)}"
    if size > limits.MAX_PARAM_VALUE_BYTES:
        return f"must be at most {limits.MAX_PARAM_VALUE_BYTES} UTF-8 bytes, got {size}"
    return None


def read_params(raw: object) -> tuple[Params | None, list[SpecIssue]]:
    """The document's `params` (absent: `_absent`) -> (effective values sorted by name, issues);
    the values are None when there is an issue."""
    if raw is _ABSENT:
        return (), []
    if not isinstance(raw, Mapping):
        return None, [SpecIssue("params", f"must be a mapping of name to default, got {show(raw)}")]
    if len(raw) > limits.MAX_PARAMS_PER_JOB:
        return None, [SpecIssue("params", f"at most {limits.MAX_PARAMS_PER_JOB} params, "
                                          f"got {len(raw)}")]
    issues: list[SpecIssue] = []
    values: dict[str, str] = {}
    for name, default in raw.items():
        problem = name_problem(name)
        if problem is not None:
            issues.append(SpecIssue("params", problem))
            continue
        issue = _default_issue(name, default)
        if issue is not None:
            issues.append(issue)
        else:
            values[name] = _req_text(canonical(default))
    if issues:
        return None, issues
    return tuple(sorted(values.items())), []


_MAX_INT_BITS: Final = math.ceil(limits.MAX_PARAM_VALUE_BYTES * math.log2(10))
"""An integer default past this many bits has more digits than a value may have bytes (and
Python refuses to write one past 4,300 digits as a string)."""


def _default_issue(name: str, default: object) -> SpecIssue | None:
    path = f"params.{name}"
    if isinstance(default, int) and default.bit_length() > _MAX_INT_BITS:
        return SpecIssue(path, f"must be at most {limits.MAX_PARAM_VALUE_BYTES} UTF-8 bytes, "
                               f"got an integer of {default.bit_length()} bits")
    if default is None:
        return SpecIssue(path, f"required (no default): give it with --param {name}=VALUE")
    text = canonical(default)
    if text is None or (isinstance(default, float) and text in ("nan", "inf", "-inf")):
        return SpecIssue(path, "a default must be a string, an integer, a float, a bool or null "
                               f"(required), got {show(default)}")
    problem = value_problem(text)
    return None if problem is None else SpecIssue(path, problem)


def _req_text(text: str | None) -> str:
    assert text is not None, "a checked default has a canonical string"
    return text


class _Absent:
    """The value of `params` when the document has none."""


_ABSENT: Final = _Absent()


def params_field(doc: Mapping[Any, Any]) -> object:
    """The document's `params` value, or the marker `read_params` takes for "absent"."""
    return doc.get("params", _ABSENT)


# --- overrides ------------------------------------------------------------------------------------


def _check_overrides(known: list[str], overrides: Mapping[str, str]) -> None:
    """SpecError naming every unknown or malformed override (`--param NAME: ...`)."""
    issues: list[SpecIssue] = []
    has = ", ".join(known) if known else "none"
    for name, value in overrides.items():
        if name not in known:
            issues.append(SpecIssue(f"--param {name}",
                                    f"the job has no param {name!r} (it has: {has})"))
        elif not isinstance(value, str):
            issues.append(SpecIssue(f"--param {name}", f"must be a string, got {show(value)}"))
        else:
            problem = value_problem(value)
            if problem is not None:
                issues.append(SpecIssue(f"--param {name}", problem))
    if issues:
        raise SpecError(issues)


def with_params(doc: object, overrides: Mapping[str, str]) -> object:
    """The user document `doc` with its `params` defaults replaced by `overrides` (a copy; `doc`
    is unchanged), for validation. No overrides: `doc` itself. SpecError for an unknown name or
    a bad value; a document that is no mapping, or whose `params` is none, is left to the
    validator (which names it) unless there are overrides to apply."""
    if not overrides:
        return doc
    raw = params_field(doc) if isinstance(doc, Mapping) else _ABSENT
    declared = raw if isinstance(raw, Mapping) else {}
    _check_overrides(sorted(str(name) for name in declared), overrides)
    assert isinstance(doc, Mapping)
    return {**doc, "params": {**declared, **overrides}}


def spec_with_params(spec: JobSpec, overrides: Mapping[str, str]) -> JobSpec:
    """A validated spec with some of its params' values replaced (SpecError as `with_params`)."""
    if not overrides:
        return spec
    current = dict(spec.params)
    _check_overrides(sorted(current), overrides)
    return replace(spec, params=tuple(sorted({**current, **overrides}.items())))


def params_refused(error: SpecError) -> bool:
    """Whether `error` is about the overrides (`--param NAME: ...`), not the spec itself."""
    return any(issue.path.startswith("--param ") for issue in error.issues)


def parse_assignment(text: str) -> tuple[str, str]:
    """`NAME=VALUE` (a `--param` argument) -> (NAME, VALUE); ValueError saying what is wrong.
    `NAME=` gives the empty string."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"--param {text!r}: expected NAME=VALUE")
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(f"--param {text!r}: {problem}")
    return name, value


def parse_assignments(texts: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Several `--param` arguments -> {NAME: VALUE}; ValueError on a malformed or repeated one."""
    values: dict[str, str] = {}
    for text in texts:
        name, value = parse_assignment(text)
        if name in values:
            raise ValueError(f"--param {name}: given twice")
        values[name] = value
    return values
