"""The CLI's client certificate: where it comes from (--tls-* flags, $RAFTSCHED_TLS_*, the recorded
dev cluster, --insecure-dev), and what a refused handshake or certificate looks like — one
`error:` line with a hint, at once, never a traceback — against a real in-process gRPC server
that requires client certificates (the replica's `identity.IdentityCheck` before a stand-in
servicer)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched import environment, eventlog, rpc, tls, tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.api import raftsched_pb2_grpc as pb_grpc
from raftsched.cli import common
from raftsched.cli import main as cli
from raftsched.dev import pki, record
from raftsched.errors import Code, RaftschedError
from raftsched.replica import identity
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord
from tests.support import paths

TIMEOUT_S = "20"
"""--timeout of the commands below; a refused handshake must end them long before."""
FAIL_FAST_S = 5.0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- where the certificate comes from ---------------------------------------------------------


@dataclass
class Made:
    tls: list[tls.TlsFiles | None]
    tokens: list[str | None]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Made:
    """A fake client (it records its TLS files), servers from the environment, no TLS settings
    and no dev cluster."""
    seen = Made([], [])

    class Fake:
        def get_job(self, job_id: str) -> Any:
            return pb.Job(job_id=job_id, name="n", tenant="t", state="RUNNING",
                          tasks={"RUNNING": 1}, total_tasks=1)

        def close(self) -> None:
            pass

    def make_client(servers: list[str], timeout_s: float,
                    tls_files: tls.TlsFiles | None = None, token: str | None = None) -> Any:
        seen.tls.append(tls_files)
        seen.tokens.append(token)
        return Fake()

    monkeypatch.setattr(common, "make_client", make_client)
    monkeypatch.setenv(common.SERVERS_ENV, "127.0.0.1:7001")
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "dev"))
    for name in common.TLS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(common.TOKEN_ENV, TOKEN.token)
    return seen


def record_dev_cluster(directory: Path, *, insecure: bool,
                       user_tls: record.TlsPaths | None) -> None:
    directory.mkdir(exist_ok=True)
    state = record.ClusterState(str(directory), "mock", "", 0, insecure=insecure,
                                    user_tls=user_tls)
    state.replicas.append(record.ReplicaEntry("replica-1", 1, 1, "127.0.0.1:9001",
                                                  "127.0.0.1:9101", 0, "d", "l"))
    record.save_state(state)


def files(prefix: str) -> tls.TlsFiles:
    return tls.TlsFiles(Path(f"{prefix}ca"), Path(f"{prefix}cert"), Path(f"{prefix}key"))


def test_the_token_comes_from_the_flag_then_the_environment_then_the_dev_cluster(
        capsys: pytest.CaptureFixture[str], made: Made, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.delenv(common.TOKEN_ENV, raising=False)
    dev_token, env_token, flag_token = (tokens.new_token().token for _ in range(3))
    (tmp_path / "admin.token").write_text(dev_token + "\n")
    dev = record.TlsPaths("dev-ca", "dev-cert", "dev-key", str(tmp_path / "admin.token"))
    record_dev_cluster(tmp_path / "dev", insecure=False, user_tls=dev)
    assert run(capsys, "job", "status", "j")[0] == 0
    assert made.tokens[-1] == dev_token
    monkeypatch.setenv(common.TOKEN_ENV, env_token)
    assert run(capsys, "job", "status", "j")[0] == 0
    assert made.tokens[-1] == env_token
    assert run(capsys, "job", "status", "j", "--token", flag_token)[0] == 0
    assert made.tokens[-1] == flag_token
    code, _, err = run(capsys, "job", "status", "j", "--token", "hunter2")
    assert code == 2 and "is not a token" in err and "hunter2" not in err


def test_the_env_names_are_raftsched_tls_ones() -> None:
    assert common.TLS_ENV == ("RAFTSCHED_TLS_CA", "RAFTSCHED_TLS_CERT", "RAFTSCHED_TLS_KEY")


def test_flags_then_environment_then_the_dev_cluster(
        capsys: pytest.CaptureFixture[str], made: Made, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    dev = record.TlsPaths("dev-ca", "dev-cert", "dev-key")
    record_dev_cluster(tmp_path / "dev", insecure=False, user_tls=dev)
    assert run(capsys, "job", "status", "j")[0] == 0
    assert made.tls[-1] == files("dev-")

    for name, value in zip(common.TLS_ENV, ("env-ca", "env-cert", "env-key"), strict=True):
        monkeypatch.setenv(name, value)
    run(capsys, "job", "status", "j")
    assert made.tls[-1] == files("env-")

    run(capsys, "job", "status", "j", "--tls-ca", "flag-ca", "--tls-cert", "flag-cert",
        "--tls-key", "flag-key")
    assert made.tls[-1] == files("flag-")
    run(capsys, "job", "status", "j", "--tls-ca", "flag-ca")  # each file on its own
    assert made.tls[-1] == tls.TlsFiles(Path("flag-ca"), Path("env-cert"), Path("env-key"))


def test_a_dev_cluster_run_insecure_is_spoken_to_in_plaintext(
        capsys: pytest.CaptureFixture[str], made: Made, tmp_path: Path) -> None:
    record_dev_cluster(tmp_path / "dev", insecure=True, user_tls=None)
    assert run(capsys, "job", "status", "j")[0] == 0
    assert made.tls == [None]


def test_insecure_dev_is_plaintext_whatever_the_environment_says(
        capsys: pytest.CaptureFixture[str], made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.TLS_CA_ENV, "env-ca")
    assert run(capsys, "job", "status", "j", "--insecure-dev")[0] == 0
    assert made.tls == [None]
    code, _, err = run(capsys, "job", "status", "j", "--insecure-dev", "--tls-cert", "c")
    assert code == 2
    assert err == ("error: INVALID_ARGUMENT: --insecure-dev (plaintext) and --tls-* exclude "
                   "each other\n")


def test_no_certificate_anywhere_is_a_usage_error_saying_where_to_get_one(
        capsys: pytest.CaptureFixture[str], made: Made) -> None:
    code, out, err = run(capsys, "job", "status", "j")
    assert (code, out, made.tls) == (2, "", [])
    assert err.startswith("error: INVALID_ARGUMENT: no client certificate: the scheduler's API "
                          "is mutual TLS only; pass --tls-ca, --tls-cert and --tls-key, set "
                          "$RAFTSCHED_TLS_CA")
    assert "raftsched dev up" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "job", "status", "j", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "INVALID_ARGUMENT"


def test_some_but_not_all_files_name_what_is_missing(
        capsys: pytest.CaptureFixture[str], made: Made) -> None:
    code, _, err = run(capsys, "job", "status", "j", "--tls-ca", "ca.pem")
    assert code == 2
    assert err.startswith("error: INVALID_ARGUMENT: TLS needs a CA, a certificate and a key; "
                          "missing: certificate, key")


def test_a_secure_dev_cluster_without_a_user_certificate_says_to_restart_it(
        capsys: pytest.CaptureFixture[str], made: Made, tmp_path: Path) -> None:
    record_dev_cluster(tmp_path / "dev", insecure=False, user_tls=None)
    code, _, err = run(capsys, "job", "status", "j")
    assert code == 2 and "has no user certificate; restart it" in err


def test_help_says_where_the_defaults_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "job", "status", "--help")
    assert code == 0
    text = " ".join(out.split())
    for option, env in zip(("--tls-ca", "--tls-cert", "--tls-key"), common.TLS_ENV,
                           strict=True):
        assert option in text and f"${env}" in text
    assert "else the recorded dev cluster's user certificate" in text
    assert "--insecure-dev" in text


# --- refused handshakes and certificates -------------------------------------------------------


class Jobs(pb_grpc.SchedulerServicer):  # type: ignore[misc]
    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.Job(job_id=request.job_id, name="n", tenant="t", priority=50,
                      state="RUNNING", tasks={"RUNNING": 1}, total_tasks=1,
                      failure_policy="skip_downstream", submitted_ms=1_000, started_ms=2_000)


@dataclass
class Pki:
    user: tls.TlsFiles
    agent: tls.TlsFiles
    impostor: tls.TlsFiles
    """The right name, signed by another CA."""
    foreign_ca: Path


TOKEN = tokens.new_token()
"""The stand-in server knows this one token (role user, every tenant)."""


class OneToken:
    """The guard's state reader: a state holding TOKEN only."""

    def __init__(self) -> None:
        self.state = State()
        self.state.tokens[TOKEN.token_id] = TokenRecord(TOKEN.token_id, TOKEN.digest,
                                                        ALL_TENANTS, Role.USER, 0, "test")

    def read(self, fn: Any) -> Any:
        return fn(self.state)

    def read_unlocked(self, fn: Any) -> Any:
        return fn(self.state)

    def current_read(self, context: Any, fn: Any) -> Any:
        return fn(self.state)

    def leads(self) -> bool:
        return True


@dataclass
class Served:
    secure: list[str]
    """The mutual-TLS server, under two names its certificate holds (127.0.0.1, localhost)."""
    plain: str
    pki: Pki


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("tls")
    authority = pki.create_authority(root / "ca")
    foreign = pki.create_authority(root / "foreign", name="another CA")
    issued = Pki(user=pki.issue_user(authority, "ada"), agent=pki.issue_agent(authority, "east"),
                 impostor=pki.issue_user(foreign, "ada"), foreign_ca=foreign.ca_path)
    scheduler = pb.DESCRIPTOR.services_by_name["Scheduler"]
    secure = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[identity.IdentityCheck([scheduler], OneToken())])
    pb_grpc.add_SchedulerServicer_to_server(Jobs(), secure)
    port = secure.add_secure_port(
        "127.0.0.1:0", pki.issue_replica(authority, []).server_credentials())
    plain = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SchedulerServicer_to_server(Jobs(), plain)
    plain_port = plain.add_insecure_port("127.0.0.1:0")
    secure.start()
    plain.start()
    try:
        yield Served([f"127.0.0.1:{port}", f"localhost:{port}"], f"127.0.0.1:{plain_port}",
                     issued)
    finally:
        secure.stop(grace=None)
        plain.stop(grace=None)


@pytest.fixture
def no_dev_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(environment.DEV_DIR_ENV, str(tmp_path / "none"))
    monkeypatch.delenv(common.SERVERS_ENV, raising=False)
    for name in common.TLS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(common.TOKEN_ENV, TOKEN.token)


def flags(files: tls.TlsFiles) -> list[str]:
    return ["--tls-ca", str(files.ca), "--tls-cert", str(files.cert), "--tls-key",
            str(files.key)]


def status(capsys: pytest.CaptureFixture[str], servers: list[str],
           *options: str) -> tuple[int, str, str, float]:
    started_s = time.monotonic()
    code, out, err = run(capsys, "job", "status", "j", "--servers", ",".join(servers),
                         "--timeout", TIMEOUT_S, *options)
    # The stand-in server runs in this process: drop its own event lines (JSON) from stderr.
    err = "".join(line for line in err.splitlines(keepends=True)
                  if eventlog.parse_line(line) is None)
    return code, out, err, time.monotonic() - started_s


@pytest.mark.usefixtures("no_dev_cluster")
def test_a_user_certificate_gets_an_answer(capsys: pytest.CaptureFixture[str],
                                           served: Served) -> None:
    code, out, err, _ = status(capsys, served.secure, *flags(served.pki.user))
    assert (code, err) == (0, "")
    assert "RUNNING" in out


@pytest.mark.usefixtures("no_dev_cluster")
def test_an_agent_certificate_is_refused_with_a_hint(capsys: pytest.CaptureFixture[str],
                                                     served: Served) -> None:
    code, out, err, _ = status(capsys, served.secure, *flags(served.pki.agent))
    assert (code, out) == (2, "")
    assert err.startswith("error: PERMISSION_DENIED: ") and err.count("\n") == 1
    assert "answered PERMISSION_DENIED: 'raftsched-agent:east' may not call" in err
    assert "; the server refused this certificate: client commands need a user certificate " \
           "(common name raftsched-user:NAME)" in err
    code, out, _, _ = status(capsys, served.secure, *flags(served.pki.agent), "--json")
    error = json.loads(out)["error"]
    assert code == 2 and set(error) == {"code", "message", "hint"}
    assert error["hint"].startswith("the server refused this certificate")


@pytest.mark.usefixtures("no_dev_cluster")
@pytest.mark.parametrize(("case", "hint"), [
    ("impostor", "the server refused this certificate: it must be signed by the cluster's CA"),
    ("foreign_ca", "this client refused the server's certificate: --tls-ca"),
    ("plaintext", "the server accepts mutual TLS only: pass --tls-ca"),
    ("tls_to_plain", "the server does not speak TLS: a cluster run with --insecure-dev is "
                     "reached with --insecure-dev"),
])
def test_a_refused_handshake_ends_at_once_with_one_line_and_a_hint(
        capsys: pytest.CaptureFixture[str], served: Served, case: str, hint: str) -> None:
    user = served.pki.user
    servers, options = {
        "impostor": (served.secure, flags(tls.TlsFiles(user.ca, served.pki.impostor.cert,
                                                       served.pki.impostor.key))),
        "foreign_ca": (served.secure, flags(tls.TlsFiles(served.pki.foreign_ca, user.cert,
                                                         user.key))),
        "plaintext": (served.secure, ["--insecure-dev"]),
        "tls_to_plain": ([served.plain], flags(user)),
    }[case]
    code, out, err, elapsed_s = status(capsys, servers, *options)
    assert (code, out) == (3, "")
    assert elapsed_s < FAIL_FAST_S, "a refused handshake waited out --timeout"
    assert err.startswith("error: UNAVAILABLE: could not connect to ") and err.count("\n") == 1
    assert "nothing was sent; " + hint in err
    code, out, _, _ = status(capsys, servers, *options, "--json")
    error = json.loads(out)["error"]
    assert code == 3 and error["code"] == "UNAVAILABLE" and error["hint"].startswith(hint)


@pytest.mark.usefixtures("no_dev_cluster")
def test_a_refused_submit_says_nothing_was_sent_not_that_the_outcome_is_unknown(
        capsys: pytest.CaptureFixture[str], served: Served) -> None:
    code, _, err = run(capsys, "submit", str(paths.EXAMPLES / "demo.yaml"), "--servers",
                       served.secure[0], "--insecure-dev", "--timeout", TIMEOUT_S)
    assert code == 3
    assert "nothing was sent; the server accepts mutual TLS only" in err
    assert "outcome is unknown" not in err


def test_the_real_command_prints_one_line_and_no_grpc_log(served: Served, tmp_path: Path) -> None:
    """In a fresh process gRPC core would log the refused handshake on stderr itself."""
    options = flags(tls.TlsFiles(served.pki.foreign_ca, served.pki.user.cert,
                                 served.pki.user.key))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(paths.REPO),
           environment.DEV_DIR_ENV: str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "raftsched", "job", "status", "j",
                           "--servers", served.secure[0], "--timeout", TIMEOUT_S, *options],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: UNAVAILABLE: could not connect to ")
    assert "TLS handshake failed" in done.stderr and "Traceback" not in done.stderr


# --- how gRPC core's words are read (raftsched.rpc) ------------------------------------------


class Failed(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[()]:
        return ()


LAST = "failed to connect to all addresses; last error: "


@pytest.mark.parametrize(("details", "detail", "closed"), [
    (LAST + "UNKNOWN: ipv4:127.0.0.1:5: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
     "SSL_ERROR_SSL: error:1a000064:ECDSA routines:OPENSSL_internal:BAD_SIGNATURE: certificate "
     "signature failure: OK",
     "TLS handshake failed: certificate signature failure (BAD_SIGNATURE)", False),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:5: Custom verification check failed with error: "
     "UNAUTHENTICATED: Hostname Verification Check failed.",
     "TLS handshake failed: Hostname Verification Check failed", False),
    (LAST + "UNAVAILABLE: ipv4:127.0.0.1:5: Socket closed",
     "the server closed the connection during the handshake", True),
])
def test_refused_handshakes_are_told_apart_from_a_closed_port(details: str, detail: str,
                                                              closed: bool) -> None:
    error = rpc.error_from_rpc(Failed(grpc.StatusCode.UNAVAILABLE, details), "h:5")
    assert isinstance(error, rpc.HandshakeFailed) and rpc.retryable(error)
    assert (error.detail, error.server_closed) == (detail, closed)
    assert error.message == f"could not connect to h:5 ({detail}); nothing was sent"
    refused = rpc.error_from_rpc(Failed(grpc.StatusCode.UNAVAILABLE, LAST + "UNAVAILABLE: "
                                        "ipv4:127.0.0.1:5: Connection refused"), "h:5")
    assert not isinstance(refused, rpc.HandshakeFailed)


@pytest.mark.parametrize("status", [grpc.StatusCode.UNAUTHENTICATED,
                                    grpc.StatusCode.PERMISSION_DENIED])
def test_a_refused_certificate_is_final(status: grpc.StatusCode) -> None:
    error = rpc.error_from_rpc(Failed(status, "not for you"), "h:5")
    assert isinstance(error, rpc.AccessDenied) and not rpc.retryable(error)
    assert (error.code, error.status, error.message) == (
        Code(status.name), status.name, f"h:5 answered {status.name}: not for you")


# --- the retry notices end a call every server refused --------------------------------------


def test_retry_notices_end_the_call_once_every_server_refused_the_handshake(
        capsys: pytest.CaptureFixture[str]) -> None:
    notices = common.RetryNotices(30.0, servers=["a:1", "b:1"])
    first = rpc.HandshakeFailed("a:1", "TLS handshake failed: x", server_closed=False)
    notices(first, 0.1)
    notices(first, 0.1)  # the same server again: still one of two
    assert capsys.readouterr().err == ""  # no "waiting" line for it
    second = rpc.HandshakeFailed("b:1", "TLS handshake failed: x", server_closed=False)
    with pytest.raises(rpc.HandshakeFailed) as caught:
        notices(second, 0.1)
    assert caught.value is second
    notices(RaftschedError(Code.UNAVAILABLE, "could not connect to c:1 (refused)"), 0.1)
    assert capsys.readouterr().err.startswith("waiting: could not connect to c:1")


def test_hints_only_for_refused_handshakes_and_certificates() -> None:
    assert common.tls_hint(RaftschedError(Code.UNAVAILABLE, "x"), True) == ""
    denied = rpc.AccessDenied("a:1", "UNAUTHENTICATED", "no client certificate")
    assert denied.code is Code.UNAUTHENTICATED
    assert denied.message == "a:1 answered UNAUTHENTICATED: no client certificate"
    assert common.tls_hint(denied, True).startswith("the server refused this certificate")
