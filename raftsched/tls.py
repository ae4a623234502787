"""TLS for the gRPC API: credentials for replicas, agents and clients, and who a caller is.

Every gRPC connection is mutual TLS against the cluster's CA, unless a process runs with
`--insecure-dev` (plaintext, no identity: throwaway local clusters only). Python's gRPC can either
require a client certificate or not ask for one at all — it cannot ask and accept its absence —
so every caller presents one. The certificate's common name says who it is:

- `raftsched-agent:CLUSTER` — the agent of that one compute cluster: it may call the
  AgentGateway service for CLUSTER and nothing else (Register/Heartbeat/Report naming another
  cluster: PERMISSION_DENIED);
- `raftsched-user:NAME` — a person or service: the Scheduler and Admin services, never the
  AgentGateway.

`raftsched dev up` makes a throwaway CA and these certificates (raftsched/dev/pki.py); a real
deployment issues them from its own CA (README: "Certificates").
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from raftsched.errors import Code, RaftschedError

AGENT_PREFIX = "raftsched-agent:"
USER_PREFIX = "raftsched-user:"
CA_ENV = "RAFTSCHED_TLS_CA"
CERT_ENV = "RAFTSCHED_TLS_CERT"
KEY_ENV = "RAFTSCHED_TLS_KEY"
MAX_PEM_BYTES = 1024 * 1024
"""A CA bundle, certificate or key file larger than this is refused, not read."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: the CA that signs every certificate of the cluster, and this process's own
    certificate (chain) and private key."""

    ca: Path
    cert: Path
    key: Path

    def load(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) bytes; RaftschedError(FAILED_PRECONDITION) naming the unusable file."""
        return _read(self.ca, "CA"), _read(self.cert, "certificate"), _read(self.key, "key")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        ca, cert, key = self.load()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                            certificate_chain=cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        ca, cert, key = self.load()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                           require_client_auth=True)


def _read(path: Path, what: str) -> bytes:
    try:
        if not path.is_file():
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"TLS {what} {path}: not a regular file")
        if path.stat().st_size > MAX_PEM_BYTES:
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"TLS {what} {path}: larger than {MAX_PEM_BYTES} bytes")
        data = path.read_bytes()
    except OSError as error:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"TLS {what} {path}: {error.strerror or error}") from None
    if b"-----BEGIN" not in data:
        raise RaftschedError(Code.FAILED_PRECONDITION, f"TLS {what} {path}: not PEM")
    return data


def files_from(ca: str | None, cert: str | None, key: str | None,
               env: Mapping[str, str] = os.environ) -> TlsFiles | None:
    """TlsFiles from options, else from $RAFTSCHED_TLS_CA/_CERT/_KEY; None when none is set.
    Some but not all of the three: RaftschedError(INVALID_ARGUMENT) naming what is missing."""
    given = {"CA": ca or env.get(CA_ENV, ""), "certificate": cert or env.get(CERT_ENV, ""),
             "key": key or env.get(KEY_ENV, "")}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise RaftschedError(
            Code.INVALID_ARGUMENT,
            f"TLS needs a CA, a certificate and a key; missing: {', '.join(missing)} "
            f"(options --tls-ca/--tls-cert/--tls-key or ${CA_ENV}/${CERT_ENV}/${KEY_ENV})")
    return TlsFiles(Path(given["CA"]), Path(given["certificate"]), Path(given["key"]))


def open_channel(address: str, tls: TlsFiles | None,
                 options: Sequence[tuple[str, Any]]) -> grpc.Channel:
    """A channel to `address`: mutual TLS with `tls`, plaintext without (--insecure-dev)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)


def common_name(context: grpc.ServicerContext) -> str | None:
    """The verified client certificate's common name, or None on a plaintext connection."""
    auth = context.auth_context()
    names = auth.get("x509_common_name") if auth else None
    if not names:
        return None
    value = names[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def agent_name(cluster_id: str) -> str:
    return f"{AGENT_PREFIX}{cluster_id}"


def user_name(name: str) -> str:
    return f"{USER_PREFIX}{name}"
