"""A throwaway certificate authority for local clusters (`raftsched dev up`, the demo, tests).

It makes what `raftsched.tls` expects: a CA, one certificate for the replicas (its subject
alternative names are the hosts they listen on), one per agent (`raftsched-agent:CLUSTER`) and
one for the local user (`raftsched-user:NAME`); `load_authority` reopens the CA to issue more
(`raftsched dev add-agent`). Keys are EC P-256, written 0600. A real deployment uses its own CA
and keeps its key offline (README: "Certificates").
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftsched import tokens
from raftsched.tls import TlsFiles, agent_name, user_name

DEV_CERT_DAYS = 365
"""Validity of a dev certificate (the clock may be skewed in tests: they start a day early)."""
CA_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
REPLICA_NAME = "raftsched-replica"


@dataclass(frozen=True, slots=True)
class Authority:
    directory: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def ca_path(self) -> Path:
        return self.directory / CA_FILE


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_private(path: Path, data: bytes) -> None:
    """Created 0600 (never readable by others, not even for a moment)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def write_token(path: Path, token: str) -> None:
    """An API token made elsewhere (e.g. by CreateToken) in `path` (0600)."""
    _write_private(path, (token + "\n").encode())


def write_admin_token(path: Path) -> str:
    """A new API token in `path` (0600), for a replica's --bootstrap-token-file and the local
    user; returns it."""
    token = tokens.new_token().token
    _write_private(path, (token + "\n").encode())
    return token


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def create_authority(directory: Path, name: str = "raftsched dev CA") -> Authority:
    """A new self-signed CA in `directory` (ca.pem, ca.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    start = _now() - datetime.timedelta(days=1)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + datetime.timedelta(days=DEV_CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(directory / CA_KEY_FILE, _key_pem(key))
    (directory / CA_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(directory, cert, key)


def load_authority(directory: Path) -> Authority:
    """The CA that `create_authority` wrote in `directory` (ca.pem, ca.key), to issue more
    certificates from. Raises OSError when a file cannot be read and ValueError naming what is
    wrong when they are not a CA and its key."""
    cert = x509.load_pem_x509_certificate((directory / CA_FILE).read_bytes())
    key = serialization.load_pem_private_key((directory / CA_KEY_FILE).read_bytes(),
                                             password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / CA_KEY_FILE} is not an EC private key")
    if key.public_key() != cert.public_key():
        raise ValueError(f"{directory / CA_KEY_FILE} is not the key of {directory / CA_FILE}")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise ValueError(f"{directory / CA_FILE} is not a CA certificate")
    return Authority(directory, cert, key)


def issue(authority: Authority, file_stem: str, common_name: str, *,
          hosts: Iterable[str] = (), server: bool = False) -> TlsFiles:
    """A certificate signed by `authority` for `common_name` (client auth; server auth too when
    `server`, valid for `hosts`: IP addresses or DNS names), written as FILE_STEM.pem/.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = _now() - datetime.timedelta(days=1)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH, *([ExtendedKeyUsageOID.SERVER_AUTH] if server
                                                 else [])]
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name)).issuer_name(authority.cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start)
               .not_valid_after(start + datetime.timedelta(days=DEV_CERT_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(authority.key, hashes.SHA256())
    cert_path = authority.directory / f"{file_stem}.pem"
    key_path = authority.directory / f"{file_stem}.key"
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return TlsFiles(authority.ca_path, cert_path, key_path)


def issued(directory: Path, file_stem: str) -> TlsFiles:
    """What `issue` wrote for `file_stem` in `directory` (beside the CA), to use it again
    (`dev add-group` restarts agents and starts replicas with them); OSError naming the first
    file missing."""
    files = TlsFiles(directory / CA_FILE, directory / f"{file_stem}.pem",
                     directory / f"{file_stem}.key")
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing")
    return files


REPLICA_FILE_STEM = "replica"


def agent_file_stem(cluster_id: str) -> str:
    return f"agent-{cluster_id}"


def issue_replica(authority: Authority, hosts: Iterable[str]) -> TlsFiles:
    return issue(authority, REPLICA_FILE_STEM, REPLICA_NAME,
                 hosts=sorted({"127.0.0.1", "localhost", *hosts}), server=True)


def issue_agent(authority: Authority, cluster_id: str) -> TlsFiles:
    return issue(authority, agent_file_stem(cluster_id), agent_name(cluster_id))


def issue_user(authority: Authority, name: str) -> TlsFiles:
    return issue(authority, f"user-{name}", user_name(name))


def issue_web(authority: Authority, hosts: Iterable[str] = ()) -> TlsFiles:
    """The web console's certificate: a user identity (raftsched-user:web-console) for its
    calls to the replicas, and its HTTPS listener's certificate for `hosts`."""
    return issue(authority, "web", user_name("web-console"),
                 hosts=sorted({"127.0.0.1", "localhost", *hosts}), server=True)
