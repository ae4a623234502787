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

import functools
import hashlib
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from raftsched.environment import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from raftsched.errors import Code, RaftschedError

AGENT_PREFIX = "raftsched-agent:"
USER_PREFIX = "raftsched-user:"
MAX_PEM_BYTES = 1024 * 1024
"""A CA bundle, certificate or key file larger than this is refused, not read."""
FINGERPRINT_CACHE_SIZE = 4096
"""Peer certificates whose fingerprint a replica remembers (one sha256 per new certificate)."""


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
    given = {"CA": ca or env.get(TLS_CA_ENV, ""), "certificate": cert or env.get(TLS_CERT_ENV, ""),
             "key": key or env.get(TLS_KEY_ENV, "")}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if not value]
    if missing:
        raise RaftschedError(
            Code.INVALID_ARGUMENT,
            f"TLS needs a CA, a certificate and a key; missing: {', '.join(missing)} "
            f"(options --tls-ca/--tls-cert/--tls-key or "
            f"${TLS_CA_ENV}/${TLS_CERT_ENV}/${TLS_KEY_ENV})")
    return TlsFiles(Path(given["CA"]), Path(given["certificate"]), Path(given["key"]))


def open_channel(address: str, tls: TlsFiles | None,
                 options: Sequence[tuple[str, Any]]) -> grpc.Channel:
    """A channel to `address`: mutual TLS with `tls`, plaintext without (--insecure-dev)."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """What a call's verified client certificate says of its caller."""

    common_name: str | None
    """The certificate's common name; None on a plaintext connection."""
    fingerprint: str | None
    """sha256 (hex) of its DER bytes, what `raftsched admin cert revoke` names; None on a
    plaintext connection."""


def peer_certificate(context: grpc.ServicerContext) -> PeerCertificate:
    """The verified client certificate of a call, from one read of its auth context (gRPC builds
    that anew on every call, PEM included: ~2 µs; `scripts/bench auth`). Nothing is kept per
    connection: gRPC names a connection only by its peer address, which a later connection
    with another certificate may reuse; the fingerprint is remembered per certificate."""
    auth = context.auth_context()
    if not auth:
        return PeerCertificate(None, None)
    names = auth.get("x509_common_name")
    pems = auth.get("x509_pem_cert")
    return PeerCertificate(_text(names[0]) if names else None,
                           _pem_fingerprint(_bytes(pems[0])) if pems else None)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@functools.lru_cache(maxsize=FINGERPRINT_CACHE_SIZE)
def _pem_fingerprint(pem: bytes) -> str:
    der = ssl.PEM_cert_to_DER_cert(pem.decode("ascii", "replace"))
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True, slots=True)
class CertIdentity:
    fingerprint: str
    """sha256 of the DER bytes, lowercase hex."""
    subject: str
    """The common name ("" when it has none)."""


def certificate_identity(path: Path) -> CertIdentity:
    """The fingerprint and common name of the first certificate in a PEM file (RaftschedError
    INVALID_ARGUMENT naming the file when it holds none)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    data = _read(path, "certificate")
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError as error:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"{path}: not a PEM certificate ({error})") from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    subject = names[0].value if names else ""
    return CertIdentity(cert.fingerprint(hashes.SHA256()).hex(),
                        subject if isinstance(subject, str) else subject.decode())


def agent_name(cluster_id: str) -> str:
    return f"{AGENT_PREFIX}{cluster_id}"


def user_name(name: str) -> str:
    return f"{USER_PREFIX}{name}"
