"""`--config FILE`: the options of `raftsched replica` and `raftsched agent` from one TOML file.

The file holds a `[replica]` table and an `[agent]` table; each key is a long option name
without its leading dashes (`data-dir`, or `data_dir`). A comma-list option (its metavar ends in
`,...`, e.g. `--peers`) takes a TOML array of strings or one comma-separated string; a flag
(`--insecure-dev`) takes `true` or `false`; a number option a TOML number; anything else a
string. Precedence: a flag on the command line > the file > what the option defaults to (for
options whose default comes from an environment variable, the file wins over the variable).

One generic pass over the parser's own actions, so an option added to a server is valid in the
file at once: `parse_args(parser, argv, table)` finds `--config` in argv, loads and checks its
table (`ConfigError`, one line naming the file, the table and the key), hands the values to the
parser as defaults and lets a required option be satisfied by the file, then parses argv as
usual. A leaf: imports nothing of raftsched.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

OPTION = "--config"
TABLES = ("replica", "agent")
"""The tables a config file may hold: one per server command."""
MAX_CONFIG_BYTES = 1024 * 1024
"""A config file is a few hundred bytes; anything past this is refused unread."""
MAX_SUGGESTIONS = 3
LIST_METAVAR_SUFFIX = ",..."
"""How a comma-separated option shows itself (`--peers RAFT_ADDR,...`): it takes a TOML array."""
_NOT_IN_FILE = frozenset({"help", "config", "version"})
"""Options that make no sense in a config file."""


class ConfigError(Exception):
    """A config file that cannot be used: the message names the file (and table and key)."""


def add_option(parser: argparse.ArgumentParser, table: str) -> None:
    """Add `--config FILE` to a server's parser."""
    assert table in TABLES, table
    parser.add_argument(
        OPTION, metavar="FILE",
        help=f"read options from the [{table}] table of this TOML file (keys are the long "
             "option names without '--', e.g. data-dir = \"/var/lib/raftsched\"); options "
             "given on the command line win over the file")


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
               table: str) -> argparse.Namespace:
    """Parse `argv` with the [table] of the `--config` file (if argv names one) as defaults.

    ConfigError for an unusable file; argparse's own errors and --help exit as usual
    (SystemExit)."""
    path = config_path(parser, argv) if OPTION in parser._option_string_actions else None
    if path is None:
        return parser.parse_args(argv)
    original = {action.dest: action.default for action in parser._actions}
    values = file_defaults(parser, path, table)
    for action in parser._actions:
        if action.dest in values:
            action.required = False  # the file satisfies it; a flag still wins
    parser.set_defaults(**values)
    args = parser.parse_args(argv)
    _check_exclusive(parser, original, args, _where(path, table))
    return args


def config_path(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> str | None:
    """The FILE of `--config FILE` in argv (abbreviated as the parser allows), else None."""
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=parser.allow_abbrev,
                                     exit_on_error=False)
    finder.add_argument(OPTION, dest="config")
    try:
        found, _ = finder.parse_known_args(argv)
    except argparse.ArgumentError:
        return None  # `--config` without a value: the real parse reports it the usual way
    return typing.cast("str | None", found.config)


def file_defaults(parser: argparse.ArgumentParser, path: str, table: str) -> dict[str, Any]:
    """The [table] of the TOML file at `path`, checked against `parser`'s options and converted
    as the command line would convert them: {dest: value}."""
    document = _load(path)
    _check_tables(document, path)
    if table not in document:
        present = ", ".join(f"[{name}]" for name in document) or "nothing"
        raise ConfigError(f"{path}: no [{table}] table (the file has {present})")
    where = _where(path, table)
    entries = document[table]
    if not isinstance(entries, dict):
        raise ConfigError(f"{where}: expected a table, got {_toml_type(entries)}")
    options = _options(parser)
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, raw in entries.items():
        name = key.replace("_", "-")
        action = options.get(name)
        if action is None or name in _NOT_IN_FILE:
            raise ConfigError(_unknown(where, key, name, options))
        if action.dest in spelled:
            raise ConfigError(f"{where}: {spelled[action.dest]} and {key} set the same option")
        spelled[action.dest] = key
        values[action.dest] = _value(action, raw, f"{where} {key}")
    return values


def _where(path: str, table: str) -> str:
    return f"{path} [{table}]"


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read {OPTION} {path}: {error.strerror or error}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None


def _check_tables(document: Mapping[str, Any], path: str) -> None:
    for name, entry in document.items():
        if name in TABLES:
            continue
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: key {name} is outside any table; put it under "
                              f"{' or '.join(f'[{t}]' for t in TABLES)}")
        close = difflib.get_close_matches(name, TABLES, n=1)
        hint = f"; did you mean [{close[0]}]?" if close else ""
        raise ConfigError(f"{path}: unknown table [{name}]{hint} (tables: "
                          f"{', '.join(f'[{t}]' for t in TABLES)})")


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every long option of `parser` by its name without dashes."""
    options: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--"):
                options[option[2:].replace("_", "-")] = action
    return options


def _unknown(where: str, key: str, name: str, options: Mapping[str, argparse.Action]) -> str:
    if name in _NOT_IN_FILE:
        return f"{where}: {key} cannot be set in a config file"
    valid = sorted(option for option in options if option not in _NOT_IN_FILE)
    close = difflib.get_close_matches(name, valid, n=MAX_SUGGESTIONS)
    if close:
        return f"{where}: unknown key {key}; did you mean {' or '.join(close)}?"
    return f"{where}: unknown key {key} (valid keys: {', '.join(valid)})"


# --- values ---------------------------------------------------------------------------------


def _value(action: argparse.Action, raw: object, where: str) -> Any:
    """`raw` (as TOML read it) converted and checked as argparse would check the flag's text."""
    if action.nargs == 0:
        return _flag(action, raw, where)
    if action.nargs in ("*", "+") or isinstance(action.nargs, int):
        if not isinstance(raw, list):
            raise ConfigError(f"{where}: expected an array, got {_toml_type(raw)}")
        return [_scalar(action, item, where) for item in raw]
    if _is_list(action):
        raw = _joined(raw, where)
    return _scalar(action, raw, where)


def _flag(action: argparse.Action, raw: object, where: str) -> Any:
    if not isinstance(action.const, bool):  # help, version, count, store_const: not settable
        raise ConfigError(f"{where}: cannot be set in a config file")
    if not isinstance(raw, bool):
        raise ConfigError(f"{where}: expected a boolean (true or false), got {_toml_type(raw)}")
    return action.const if raw else action.default


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action.metavar, str) and action.metavar.endswith(LIST_METAVAR_SUFFIX)


def _joined(raw: object, where: str) -> object:
    """A comma-list option's array as the one comma-separated string the flag takes."""
    if not isinstance(raw, list):
        return raw  # a string is taken as the flag's text; anything else fails in _scalar
    for item in raw:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: expected an array of strings, got an array holding "
                              f"{_toml_type(item)}")
        if "," in item:
            raise ConfigError(f"{where}: {item!r}: one item per array element, no commas")
    return ",".join(raw)


def _scalar(action: argparse.Action, raw: object, where: str) -> Any:
    kind = _kind(action)
    if isinstance(raw, bool) or not isinstance(raw, _ACCEPTED[kind]):
        expected = _EXPECTED[kind]
        if _is_list(action):
            expected += " or an array of strings"
        raise ConfigError(f"{where}: expected {expected}, got {_toml_type(raw)}")
    text = raw if isinstance(raw, str) else str(raw)
    value = _converted(action, text, where)
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(choice) for choice in action.choices)
        raise ConfigError(f"{where}: {raw!r} is not one of {choices}")
    return value


def _converted(action: argparse.Action, text: str, where: str) -> Any:
    """The option's `type` applied to `text`, as argparse applies it to a flag's text."""
    convert = action.type
    if convert is None:
        return text
    if not callable(convert):  # argparse allows a registered type name; ours use callables
        raise ConfigError(f"{where}: cannot be set in a config file")
    try:
        return convert(text)
    except argparse.ArgumentTypeError as error:
        raise ConfigError(f"{where}: {error}") from None
    except (TypeError, ValueError):
        name = getattr(convert, "__name__", repr(convert))
        raise ConfigError(f"{where}: invalid {name} value: {text!r}") from None


_ACCEPTED: dict[type, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,)}
_EXPECTED: dict[type, str] = {int: "an integer", float: "a number", str: "a string"}


def _kind(action: argparse.Action) -> type:
    """What TOML type the option takes: int or float when its `type` converts to one (by its
    return annotation, e.g. `positive_int(text) -> int`), else str."""
    convert: Callable[..., object] | None = action.type if callable(action.type) else None
    if convert is int or convert is float:
        return convert
    if convert is None or convert is str:
        return str
    try:
        returned = typing.get_type_hints(convert).get("return")
    except (TypeError, NameError):  # a builtin method (str.lower) or an unresolvable hint
        return str
    return returned if returned in (int, float) else str


def _toml_type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return f"{name} ({_shown(value)})" if kind in (bool, int, float, str) else name
    return f"a date or time ({value})"


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


# --- after the parse ------------------------------------------------------------------------


def _check_exclusive(parser: argparse.ArgumentParser, original: Mapping[str, Any],
                     args: argparse.Namespace, where: str) -> None:
    """Options of a mutually exclusive group (--secret-file | --insecure-dev) set by the file
    and the command line together, or twice by the file: argparse cannot see that (the file's
    values are defaults to it). Refused rather than resolved: which one the operator meant is
    not knowable, and picking --insecure-dev by mistake is a cluster anyone can run code on."""
    for group in parser._mutually_exclusive_groups:
        chosen = [action for action in group._group_actions
                  if getattr(args, action.dest, None) != original.get(action.dest)]
        if len(chosen) > 1:
            names = " and ".join(_long_name(action) for action in chosen)
            raise ConfigError(f"{where}: {names} exclude each other (set in the file or on the "
                              "command line); keep one")


def _long_name(action: argparse.Action) -> str:
    longs = [option for option in action.option_strings if option.startswith("--")]
    return (longs or action.option_strings or [action.dest])[0]
