"""`raftsched completion bash|zsh`: a shell completion script made from the command line's own
argparse tree, so that it names every command, subcommand and option there is (the options of
`raftsched replica` and `raftsched agent` included, read from the server modules' parsers).

The script is data plus one small function: for each command path (`raftsched`, `raftsched job`,
...) its subcommands, its options, the options that take a value and their choices. Completing
walks the words typed so far down that tree, then offers subcommands, options (after `-`), an
option's choices, or file names (an option's value or a positional argument without choices).
zsh runs the same script through its bash-completion emulation (`bashcompinit`).
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from raftsched.cli.common import EXIT_OK, Subparsers, command_parser, print_json

PROGRAM = "raftsched"
SHELLS = ("bash", "zsh")
MAX_COMMAND_DEPTH = 8
"""The tree is three levels deep (`raftsched admin token create`); deeper is a bug."""

_HELP = """\
Print a completion script for SHELL, generated from this installation's command line (every
command, subcommand and option; options' choices; file names where a file is expected).

bash: eval "$(raftsched completion bash)" in ~/.bashrc, or save the output as
/etc/bash_completion.d/raftsched (or ~/.local/share/bash-completion/completions/raftsched).
zsh: eval "$(raftsched completion zsh)" in ~/.zshrc (after compinit); it uses zsh's
bash-completion emulation (bashcompinit)."""

_OUTPUT = """\
output:
  the script on stdout; exit 0
  --json: {"shell", "script"}"""


def register_completion(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    parser = command_parser(commands, "completion", [common],
                            "print a shell completion script (bash, zsh)", _HELP, _OUTPUT)
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")
    parser.set_defaults(handler=_run_completion)


def _run_completion(args: argparse.Namespace) -> int:
    # Imported here: cli.main imports this module to register the command.
    from raftsched.cli.main import build_parser

    script = completion_script(build_parser(), args.shell)
    if args.json:
        print_json({"shell": args.shell, "script": script})
    else:
        print(script, end="")
    return EXIT_OK


@dataclass(frozen=True, slots=True)
class Command:
    """One node of the command tree, as the script needs it."""

    path: str
    """The words that name it, e.g. 'raftsched admin token'."""
    commands: tuple[str, ...]
    options: tuple[str, ...]
    valued: tuple[str, ...]
    """Options that take a value (the next word is not a command)."""
    choices: tuple[tuple[str, tuple[str, ...]], ...]
    """(option, its choices) for valued options with choices; ('', ...) for a positional."""


def command_tree(parser: argparse.ArgumentParser, path: str = PROGRAM,
                 depth: int = 0) -> Iterator[Command]:
    """`parser` and every subcommand under it, depth first."""
    assert depth <= MAX_COMMAND_DEPTH, path
    actions = [*parser._actions, *_server_actions(parser)]
    subcommands: dict[str, argparse.ArgumentParser] = {}
    options: list[str] = []
    valued: list[str] = []
    choices: list[tuple[str, tuple[str, ...]]] = []
    for action in actions:
        if isinstance(action, argparse._SubParsersAction):
            subcommands.update(action.choices)
        elif action.help == argparse.SUPPRESS:
            continue
        elif action.option_strings:
            options.extend(action.option_strings)
            if action.nargs != 0:
                valued.extend(action.option_strings)
                choices.extend((option, _words(action.choices))
                               for option in action.option_strings if action.choices)
        elif action.choices:
            choices.append(("", _words(action.choices)))
    yield Command(path, tuple(subcommands), tuple(dict.fromkeys(options)),
                  tuple(dict.fromkeys(valued)), tuple(choices))
    for name, subparser in subcommands.items():
        yield from command_tree(subparser, f"{path} {name}", depth + 1)


def _server_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of `raftsched replica|agent`: their parser is the server module's own, built
    when the command runs; without the server's dependencies installed, none."""
    from raftsched.cli.servers import SERVERS

    server = SERVERS.get(str(parser.get_default("server") or ""))
    if server is None:
        return []
    try:
        module = server.load()
    except ImportError:
        return []
    own = argparse.ArgumentParser()
    module.add_arguments(own)
    return own._actions


def _words(choices: Iterable[object]) -> tuple[str, ...]:
    return tuple(str(choice) for choice in choices)


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    tree = list(command_tree(parser))
    script = _BASH.format(
        program=PROGRAM,
        commands=_cases(tree, lambda node: node.commands),
        options=_cases(tree, lambda node: node.options),
        valued=_cases(tree, lambda node: node.valued),
        choices=_choice_cases(tree),
    )
    if shell == "zsh":
        return _ZSH_PREAMBLE + script
    assert shell == "bash", shell
    return script


def _cases(tree: list[Command], field: Callable[[Command], tuple[str, ...]]) -> str:
    return "".join(f"        {shlex.quote(node.path)}) echo {shlex.quote(' '.join(field(node)))}"
                   " ;;\n" for node in tree if field(node))


def _choice_cases(tree: list[Command]) -> str:
    return "".join(
        f"        {shlex.quote(f'{node.path}|{option}')}) echo {shlex.quote(' '.join(words))} ;;\n"
        for node in tree for option, words in node.choices)


_BASH = """\
# {program} completion for bash, generated by `{program} completion bash` from the command line's
# own parser (regenerate it after an upgrade).
# Load: eval "$({program} completion bash)", or save it as /etc/bash_completion.d/{program}.

_{program}_commands() {{
    case "$1" in
{commands}    esac
}}

_{program}_options() {{
    case "$1" in
{options}    esac
}}

_{program}_valued() {{
    case "$1" in
{valued}    esac
}}

_{program}_choices() {{
    case "$1|$2" in
{choices}    esac
}}

_{program}_files() {{
    compopt -o filenames >/dev/null 2>&1
    local IFS=$'\\n'
    COMPREPLY=($(compgen -f -- "$1"))
}}

_{program}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="{program}" word words i value=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if ((value)); then
            value=0
            continue
        fi
        case "$word" in
            -*=*) ;;
            -*) case " $(_{program}_valued "$path") " in *" $word "*) value=1 ;; esac ;;
            *) case " $(_{program}_commands "$path") " in *" $word "*) path="$path $word" ;; esac ;;
        esac
    done
    COMPREPLY=()
    local IFS=$' \\t\\n'
    if ((value)); then
        words="$(_{program}_choices "$path" "${{COMP_WORDS[COMP_CWORD-1]}}")"
    elif [[ $cur == -* ]]; then
        words="$(_{program}_options "$path")"
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
        return 0
    else
        words="$(_{program}_commands "$path")"
        [[ -n $words ]] || words="$(_{program}_choices "$path" "")"
    fi
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        _{program}_files "$cur"
    fi
    return 0
}}

complete -F _{program} {program}
"""

_ZSH_PREAMBLE = """\
# zsh: the bash script below, run by zsh's bash-completion emulation.
# Load: eval "$(raftsched completion zsh)" in ~/.zshrc, after compinit.
(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }
autoload -U +X bashcompinit && bashcompinit

"""
