"""One home per rule and vocabulary (issue 23, item 4): each rule is written once, and every
place that applies it answers as the one rule does. A test here fails when a rule is written a
second time (a source scan) or when a user of the rule drifts from it (a table over its users).
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from raftsched import limits
from raftsched.errors import RaftschedError
from raftsched.protocol import id_problem

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("raftsched", "agent", "jepsen-style", "scripts")


def _product_sources() -> list[Path]:
    found: list[Path] = []
    for top in PRODUCT:
        found.extend(p for p in sorted((ROOT / top).rglob("*.py"))
                     if "api" not in p.relative_to(ROOT).parts[:2])
    return found


def _written_in(pattern: str) -> list[str]:
    """The product modules (relative paths) whose text matches `pattern`."""
    rule = re.compile(pattern)
    return [str(p.relative_to(ROOT)) for p in _product_sources() if rule.search(p.read_text())]


# --- ids --------------------------------------------------------------------------------------

IDS = ["a", "0", "job-1", "x.y_z-2", "A" * limits.MAX_ID_CHARS,  # valid
       "", "-a", ".a", "_a", "a b", "a/b", "é", "A" * (limits.MAX_ID_CHARS + 1), "a\n"]


def test_the_id_rule_is_written_once() -> None:
    assert _written_in(r"\[A-Za-z0-9\]\[A-Za-z0-9_\.-\]") == ["raftsched/protocol.py"]
    assert _written_in(r"letters, digits, '_'") == ["raftsched/protocol.py"]


def _spec_problem(task_id: str) -> str | None:
    from raftsched.spec.model import SpecError
    from raftsched.spec.validation import validate_job_doc

    try:
        validate_job_doc({"name": "n", "tasks": [{"id": task_id, "command": ["true"]}]})
    except SpecError as error:
        return str(error)
    return None


def _agent_problem(cluster_id: str, tmp_path: Path) -> str | None:
    from agent import main as agent_main

    parser = argparse.ArgumentParser()
    agent_main.add_arguments(parser)
    args = parser.parse_args([f"--cluster-id={cluster_id}", "--servers", "127.0.0.1:1",
                              "--data-dir", str(tmp_path), "--executor", "mock"])
    try:
        agent_main._config(args)
    except agent_main.UsageError as error:
        return str(error)
    return None


def _dev_problem(cluster_id: str) -> str | None:
    from raftsched.dev.add_agent import AddAgentOptions, requested_shape
    from raftsched.dev.record import DevClusterError

    try:
        requested_shape(AddAgentOptions(Path("d"), cluster_id, executor="mock"))
    except DevClusterError as error:
        return str(error)
    return None


@pytest.mark.parametrize("value", IDS)
def test_every_id_check_answers_as_the_one_rule(value: str, tmp_path: Path) -> None:
    valid = id_problem(value) is None
    assert (_spec_problem(value) is None) == valid
    assert (_agent_problem(value, tmp_path) is None) == valid
    assert (_dev_problem(value) is None) == valid


# --- environment variable names ---------------------------------------------------------------

ENV_DEFINED_ELSEWHERE = {
    # Failpoint latches beside the code they stop (the Raft adapter; raftsched.environment says).
    "RAFTSCHED_FAILPOINT_DUMP_LATCH": "raftsched/replica/raft/dumps.py",
    "RAFTSCHED_FAILPOINT_APPLY_LATCH": "raftsched/replica/raft/node.py",
    "RAFTSCHED_JEPSEN_INSIDE": "jepsen-style/jepsen/main.py",  # the harness's own re-exec mark
}


def test_every_raftsched_variable_name_is_written_once_in_the_environment_module() -> None:
    from raftsched import environment

    quoted = re.compile(r"""["'](RAFTSCHED_[A-Z_]*)["']""")
    found: dict[str, list[str]] = {}
    for path in _product_sources():
        for name in quoted.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    defined = {value for key, value in vars(environment).items()
               if key.isupper() and isinstance(value, str)}
    for name, where in sorted(found.items()):
        if name in ENV_DEFINED_ELSEWHERE:
            assert where == [ENV_DEFINED_ELSEWHERE[name]], (name, where)
        else:
            assert name in defined and where == ["raftsched/environment.py"], (name, where)


# --- no compatibility shims -------------------------------------------------------------------

def _re_exports(path: Path) -> list[str]:
    """Names a module imports only to hand on: `import x as x` / `from m import x as x`, or an
    imported name listed in its `__all__`."""
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                imported.add(name)
                if alias.asname is not None and alias.asname == alias.name:
                    found.append(name)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            listed = ast.literal_eval(node.value)
            found.extend(name for name in listed if name in imported)
    return found


RE_EXPORTS_LEFT = {
    # Known re-exports this session did not remove (issue 23): an entry may only shrink.
    "raftsched/spec/issue.py": ["show"],
    "raftsched/state/commands.py": ["KnownAttempt", "Report", "ReportKind"],
    "agent/agent.py": ["ACK_CROSSING_WINDOW_MS", "NEVER_STARTED_REASON"],
    "agent/model.py": ["TERMINAL_REPORT_KINDS", "Assignment", "Beat", "Directives",
                       "KillDirective", "KnownAttempt", "Registered", "Registration", "Report",
                       "ReportKey", "ReportKind", "ReportVerdict", "Reported", "Resources",
                       "Verdict", "task_key"],
    "jepsen-style/jepsen/checker.py": ["agent_events", "CheckError", "Report"],
}


def test_no_module_re_exports_another_modules_names() -> None:
    """A name is imported from the module that defines it: no shim keeps an old import path
    alive (the job spec's public surface, the dev cluster's and the replica's applied log were
    such shims and are gone). A package's `__init__.py` may present its package's surface."""
    shims = {str(p.relative_to(ROOT)): names for p in _product_sources()
             if p.name != "__init__.py" and (names := _re_exports(p))}
    for path, names in RE_EXPORTS_LEFT.items():
        assert set(shims.pop(path, [])) <= set(names), path
    assert shims == {}


# --- one wait in the tests, one history reader in the harness ---------------------------------

def test_the_tests_wait_through_one_wait_until() -> None:
    """Every test and helper waits through `tests.support.waiting.wait_until` (no second
    polling helper: there were five)."""
    helper = re.compile(r"^\s*def (wait_until|wait_for|_wait_until|_wait_for|eventually)\(", re.M)
    defined = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                     if helper.search(p.read_text()))
    assert defined == ["tests/support/waiting.py"]


def test_the_harness_reads_its_history_with_one_reader() -> None:
    readers = _written_in(r"(?m)^def read_history\(|json\.loads\(.*history"
                          r"|history\.jsonl.*read_text")
    assert readers == ["jepsen-style/jepsen/checks_history.py"]


# --- one HOST:PORT rule and one address option type ---------------------------------------------

ADDRESSES = ["127.0.0.1:7001", "localhost:1", "[::1]:7001", "replica-2.sched.example.com:65535",
             "nohost", ":1", "h:", "h:0", "h:65536", "h:x", "h:+1", "::1:7001", "[zz]:1",
             "[127.0.0.1]:1", "a b:1", "1.2.3.999:1", "-bad:1", "bad-:1", "a..b:1", "my_host:1",
             "h" * 300 + ":1", "h\u00e9st:1", "a.123:1"]


def _rule(address: str, port_zero: bool = False) -> bool:
    from raftsched.options import host_port

    try:
        host_port(address, port_zero="any" if port_zero else "")
    except ValueError:
        return False
    return True


def _parses(add_arguments: object, argv: list[str]) -> bool:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)  # type: ignore[operator]
    try:
        parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit):
        return False
    return True


def _cli_accepts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    from raftsched.cli.main import build_parser

    try:
        build_parser().parse_args(argv)
    except SystemExit:
        capsys.readouterr()
        return False
    return True


@pytest.mark.parametrize("address", ADDRESSES)
def test_every_address_option_answers_as_the_one_rule(
        address: str, capsys: pytest.CaptureFixture[str]) -> None:
    from agent import main as agent_main
    from raftsched.options import metrics_address
    from raftsched.replica import main as replica_main
    from raftsched.replica.raft import membership
    from raftsched.web import main as web_main

    valid = _rule(address)
    replica = ["--grpc", "127.0.0.1:2", "--data-dir", "d", "--insecure-dev"]
    assert _parses(replica_main.add_arguments, ["--raft", address, *replica]) == valid
    assert _parses(replica_main.add_arguments,
                   ["--raft", "127.0.0.1:1", "--peers", f"127.0.0.1:3,{address}", *replica[2:],
                    "--grpc", address]) == valid
    web = ["--https-cert", "c", "--https-key", "k"]
    assert _parses(web_main.add_arguments, ["--listen", address, *web]) == \
        _rule(address, port_zero=True)
    assert _cli_accepts(["job", "status", "x", "--servers", f"127.0.0.1:1,{address}"],
                        capsys) == valid
    assert _cli_accepts(["admin", "status", "--server", address], capsys) == valid
    assert _cli_accepts(["admin", "add-replica", address], capsys) == valid
    try:
        agent_main._server_groups(f"127.0.0.1:1,{address}")
        agent_ok = True
    except agent_main.UsageError:
        agent_ok = False
    assert agent_ok == valid
    try:
        membership.check_address(address)
        member_ok = True
    except RaftschedError:
        member_ok = False
    assert member_ok == valid
    try:
        metrics_address(address)
        metrics_ok = True
    except argparse.ArgumentTypeError:
        metrics_ok = False
    assert metrics_ok == _rule(address, port_zero=True)


ADDRESS_SPLITS_ELSEWHERE = {
    # They split an address the one rule already accepted, to connect to it (not option parsing).
    "raftsched/dev/ports.py", "raftsched/replica/raft/membership.py",
    "raftsched/replica/service.py",
}


def test_host_port_is_split_in_one_place() -> None:
    splits = set(_written_in(r"""\.r(partition|split)\(":"(, 1)?\)"""))
    assert splits - ADDRESS_SPLITS_ELSEWHERE == {"raftsched/options.py"}


# --- state names ------------------------------------------------------------------------------

def test_the_state_vocabulary_is_the_state_machines_names() -> None:
    """The readers' names (`raftsched.states`) are the state machine's enums' names, in order,
    with the same terminal, live and placed sets: the wire strings cannot drift apart."""
    from raftsched import states
    from raftsched.state import model

    pairs = [(model.JobState, states.JobStateName), (model.TaskState, states.TaskStateName),
             (model.AttemptState, states.AttemptStateName)]
    for numbered, named in pairs:
        assert [m.name for m in numbered] == [m.value for m in named]
    assert {s.name for s in model.TERMINAL_JOB_STATES} == states.TERMINAL_JOB_STATE_NAMES
    assert {s.name for s in model.TERMINAL_TASK_STATES} == states.TERMINAL_TASK_STATE_NAMES
    assert {s.name for s in model.LIVE_ATTEMPT_STATES} == states.LIVE_ATTEMPT_STATE_NAMES
    assert {s.name for s in model.PLACED_TASK_STATES} == states.PLACED_TASK_STATE_NAMES
    assert model.AttemptState.QUEUED.name == states.TASK_QUEUED_AT_AGENT  # late binding's word
    assert set(states.CANCELLABLE_JOB_STATE_NAMES) == \
        {s.name for s in model.JobState} - states.TERMINAL_JOB_STATE_NAMES


STATE_LITERAL = (r"""["'](PENDING|RUNNABLE|ASSIGNED|RUNNING|RETRY_WAIT|SUCCEEDED|FAILED|SKIPPED"""
                 r"""|CANCELLED|REJECTED|LOST|TIMED_OUT|PREEMPTED)["']""")
STATE_WORDS_ELSEWHERE = {
    "agent/model.py": "the agent's own record of an attempt (RUNNING, FINISHED)",
    "agent/executors/slurm.py": "Slurm's job states",
    "scripts/bench_slurm.py": "Slurm's job states (RUNNING, COMPLETING)",
    "raftsched/cli/render.py": "column titles (QUEUED, RUNNING; ASSIGNED, STARTED)",
}


def test_no_reader_spells_a_state_name_out() -> None:
    """The CLI, the client, the console (code and templates), the views and the harness use
    `raftsched.states` (or the state machine's enums), never a state's name as a literal."""
    rule = re.compile(STATE_LITERAL)
    sources = [*_product_sources(), *(ROOT / "raftsched" / "web").rglob("*.html"),
               *(ROOT / "raftsched" / "web" / "static").rglob("*.js")]
    spelled = {str(p.relative_to(ROOT)) for p in sources if rule.search(p.read_text())}
    spelled -= {"raftsched/states.py"}
    assert spelled <= set(STATE_WORDS_ELSEWHERE), sorted(spelled - set(STATE_WORDS_ELSEWHERE))
