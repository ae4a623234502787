"""Job spec text -> document: JSON when the text starts as a JSON object, else YAML (safe
loader; repeated keys refused; alias expansion bounded), each failure a `SpecError`."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.reader import ReaderError

from raftsched import limits
from raftsched.spec.issue import SpecIssue, show
from raftsched.spec.model import SpecError


def load_document(text: str | bytes, source: str, *, bounded: bool) -> object:
    size = len(text) if isinstance(text, bytes) else _utf8_size(text)
    if size > limits.MAX_SPEC_BYTES:
        _fail_file(f"{source} is {size} bytes; a job spec may be at most "
                   f"{limits.MAX_SPEC_BYTES} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            _fail_file(f"{source} is not UTF-8 text (bad byte at offset {error.start})")
    text = text.removeprefix("\ufeff")
    if not text.strip():
        _fail_file(f"{source} is empty")
    doc = _parse_text(text, source, size if bounded else None)
    if doc is None:
        _fail_file(f"{source} holds no document (only comments?)")
    return doc


_JSON_START = re.compile(r"[ \t\r\n]*\{")
"""A document meant as JSON: a JSON object (after JSON whitespace)."""


def _parse_text(text: str, source: str, bounded_size: int | None) -> object:
    """The document: JSON when the text starts as a JSON object, else YAML. A text that starts
    as a JSON object but is not one may still be a YAML flow mapping; when it is not that either,
    the JSON error is the one reported. `bounded_size` (the text's bytes) applies the replicas'
    parse bounds; None parses any size."""
    yaml_allowed = bounded_size is None or bounded_size <= limits.MAX_YAML_SPEC_BYTES
    if _JSON_START.match(text) is None:
        if not yaml_allowed:
            _fail_file(f"{source} is {bounded_size} bytes of YAML; YAML specs over "
                       f"{limits.MAX_YAML_SPEC_BYTES} bytes are not parsed by the replicas: "
                       f"send JSON (up to {limits.MAX_JSON_SPEC_BYTES} bytes) or the wire "
                       f"form ({_WIRE_HINT})")
        return _parse_yaml(text, source)
    if bounded_size is not None and bounded_size > limits.MAX_JSON_SPEC_BYTES:
        _fail_file(f"{source} is {bounded_size} bytes of JSON; JSON specs over "
                   f"{limits.MAX_JSON_SPEC_BYTES} bytes are not parsed by the replicas: send "
                   f"the wire form ({_WIRE_HINT})")
    try:
        return _parse_json_object(text, source)
    except SpecError as json_error:
        if not yaml_allowed:
            raise
        try:
            return _parse_yaml(text, source)
        except SpecError:
            raise json_error from None


_WIRE_HINT = "SubmitJobRequest.spec_wire; the raftsched CLI and Python client send it"


def _utf8_size(text: str) -> int:
    if len(text) > limits.MAX_SPEC_BYTES:
        return len(text)  # at least this many bytes; no need to encode it all
    return len(text.encode("utf-8", "surrogatepass"))


class _DuplicateKey(Exception):
    def __init__(self, key: object) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _parse_json_object(text: str, source: str) -> object:
    """The parsed JSON object (`text` starts as one); SpecError naming where it is not JSON."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as error:
        _fail_file(f"{source}: duplicate key {show(error.key)} in a JSON object")
    except json.JSONDecodeError as error:
        _fail_file(f"invalid JSON in {source} at line {error.lineno}, column {error.colno}: "
                   f"{error.msg}")
    except RecursionError:
        _fail_file(f"invalid JSON in {source}: nested too deeply")
    except ValueError as error:  # an integer of too many digits
        _fail_file(f"invalid JSON in {source}: {(str(error).splitlines() or ['?'])[0]}")


class _UniqueKeyConstructor(SafeConstructor):
    """SafeConstructor that refuses a key repeated in one mapping (merge keys `<<` still work)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                problem = f"duplicate key {show(key)} (first at line {first_line[key]})"
                raise ConstructorError(None, None, problem, key_node.start_mark)
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


class _PyLoader(_UniqueKeyConstructor, yaml.SafeLoader):
    pass


_LOADER: type[yaml.SafeLoader | yaml.CSafeLoader] = _PyLoader
if yaml.__with_libyaml__:

    class _CLoader(_UniqueKeyConstructor, yaml.CSafeLoader):
        """The libyaml parser, when PyYAML was built with it (much faster on big specs)."""

    _LOADER = _CLoader


def _parse_yaml(text: str, source: str) -> object:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, text, source)  # before any value is built from them
        return loader.construct_document(node)
    except RecursionError:
        _fail_file(f"invalid YAML in {source}: nested too deeply")
    except (yaml.YAMLError, ValueError, OverflowError, TypeError) as error:
        # ValueError and friends come from constructors (e.g. an int of 5000 digits).
        _fail_file(f"invalid YAML in {source}{_yaml_problem(error, text)}")
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, text: str, source: str) -> None:
    """Refuse a document that its aliases (and merge keys, which take aliased mappings) would
    expand past MAX_SPEC_EXPANDED_CHARS, or that repeats more through aliases than
    MAX_SPEC_ALIAS_CHARS / MAX_SPEC_ALIAS_RATIO allow, or that contains itself.

    An alias is the anchored node itself, so the nodes form a graph in which a node may be
    reached many times. Each node's expanded size (the characters of its scalars plus one per
    node) is summed once, after its children's, so the cost is O(nodes written) whatever the
    expansion, and nothing expanded is ever built. A text without both '&' and '*' has no
    alias (an alias is `*name` of an `&name` anchor) and is not walked."""
    if "&" not in text or "*" not in text:
        return
    expanded: dict[int, int] = {}
    """id(node) -> its size with every alias under it expanded."""
    open_ids: set[int] = set()
    """Collections whose children are still being summed: reaching one again is a cycle."""
    written = 0
    stack: list[yaml.Node | tuple[yaml.Node]] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):  # every child of this collection is summed
            node = item[0]
            size = _NODE_CHARS + sum(expanded[id(child)] for child in _child_nodes(node))
            if size > limits.MAX_SPEC_EXPANDED_CHARS:
                _fail_file(f"{source}: YAML aliases expand the document past "
                           f"{limits.MAX_SPEC_EXPANDED_CHARS} characters (the node at "
                           f"{_where(node)} alone expands to {size}); a job spec may expand to "
                           f"at most {limits.MAX_SPEC_EXPANDED_CHARS}")
            expanded[id(node)] = size
            open_ids.discard(id(node))
            continue
        key = id(item)
        if key in expanded:
            continue
        if isinstance(item, yaml.ScalarNode):
            expanded[key] = _NODE_CHARS + len(item.value)
            written += expanded[key]
            continue
        if key in open_ids:
            _fail_file(f"{source}: the YAML node at {_where(item)} contains an alias to itself "
                       "(a recursive document)")
        open_ids.add(key)
        written += _NODE_CHARS
        stack.append((item,))
        stack.extend(_child_nodes(item))
    repeated = expanded[id(root)] - written
    allowed = max(limits.MAX_SPEC_ALIAS_CHARS, limits.MAX_SPEC_ALIAS_RATIO * written)
    if repeated > allowed:
        _fail_file(f"{source}: YAML aliases repeat {repeated} characters of a document that "
                   f"writes out {written}; they may repeat at most {allowed} (the larger of "
                   f"{limits.MAX_SPEC_ALIAS_CHARS} and {limits.MAX_SPEC_ALIAS_RATIO} times what "
                   "is written out): write the repeated parts out, or share less")


_NODE_CHARS = 1
"""What `_check_expansion` counts for a node besides its scalar's characters."""


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _where(node: yaml.Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"


def _yaml_problem(error: Exception, text: str) -> str:
    """' at line L, column C: problem' (1-based) as far as the error tells where."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        parts = [part for part in (error.context, error.problem) if part]
        problem = ", ".join(parts) or "syntax error"
        return (f" at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark
                else f": {problem}")
    first_line = (str(error).splitlines() or ["syntax error"])[0]
    if isinstance(error, ReaderError) and isinstance(error.position, int):
        line = text.count("\n", 0, error.position) + 1
        column = error.position - (text.rfind("\n", 0, error.position) + 1) + 1
        return f" at line {line}, column {column}: {first_line}"
    return f": {first_line}"


def _fail_file(message: str) -> NoReturn:
    raise SpecError([SpecIssue("", message)])
