"""`raftsched admin cert revoke|list`: client certificates the replicas refuse."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from raftsched import limits
from raftsched.cli import render
from raftsched.cli.common import EXIT_OK, command_parser, connect, free_text, print_json
from raftsched.errors import Code, RaftschedError
from raftsched.state.text import visible


def register_certs(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    group = sub.add_parser(
        "cert", help="revoke a client certificate (a stolen agent's or user's key)",
        description="Client certificates the replicas refuse (admin role needed to revoke, "
        "operator to list). A revoked certificate is refused on every call, whatever token it "
        "carries: a stolen agent key can no longer speak for its cluster (its cluster goes "
        "SUSPECT, then LOST, and its attempts run elsewhere), a stolen user key no longer "
        "reaches the API. There is no un-revoke: issue a new certificate.")
    commands = group.add_subparsers(title="cert commands", metavar="COMMAND", required=True)
    revoke = command_parser(
        commands, "revoke", parents, "refuse a certificate from now on",
        "Revoke the certificate in CERT_PEM (or the one with --fingerprint, the sha256 of its "
        "DER bytes as `openssl x509 -noout -fingerprint -sha256` prints it, colons allowed). "
        "Calls with it are refused from the moment the revocation commits (a follower a moment "
        "behind may admit it for that moment). Revoking one twice is no error.",
        'output:\n  "revoked certificate SUBJECT (sha256 FINGERPRINT)" (or "... was revoked '
        'already")\n  --json: {"fingerprint", "subject", "created"}')
    revoke.add_argument("cert", nargs="?", metavar="CERT_PEM",
                        help="the certificate (PEM) to revoke")
    revoke.add_argument("--fingerprint", metavar="SHA256",
                        help="revoke by fingerprint instead (when the file is gone)")
    revoke.add_argument("--subject", default=None, type=free_text, metavar="NAME",
                        help="with --fingerprint: its common name, for listings")
    revoke.add_argument("--reason", default="", type=free_text, help="why (shown by cert list)")
    revoke.set_defaults(handler=_run_revoke)
    listing = command_parser(
        commands, "list", parents, "every revoked certificate",
        "List the revoked certificates: fingerprint, subject, when, why.",
        'output:\n  a table\n  --json: [{"fingerprint", "subject", "reason", "revoked_ms"}]')
    listing.set_defaults(handler=_run_list, reads_only=True)


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """(fingerprint, subject) from CERT_PEM or --fingerprint; INVALID_ARGUMENT otherwise."""
    if (args.cert is None) == (args.fingerprint is None):
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             "name the certificate: CERT_PEM or --fingerprint SHA256 (one)")
    if args.cert is not None:
        if args.subject is not None:
            raise RaftschedError(Code.INVALID_ARGUMENT,
                                 "--subject goes with --fingerprint; CERT_PEM names its own")
        from raftsched.tls import certificate_identity  # not at start-up: it imports grpc

        found = certificate_identity(Path(args.cert))
        # The common name is the certificate's, not ours to refuse: kept in its visible form
        # (the replicas store printable text only), cut to what they keep.
        return found.fingerprint, visible(found.subject)[:limits.MAX_CERT_SUBJECT_CHARS]
    from raftsched.state.commands import CertRevoke
    from raftsched.state.rules import CERT_FINGERPRINT_CHARS, cert_revoke_problem

    fingerprint = str(args.fingerprint).replace(":", "").strip().lower()
    if cert_revoke_problem(CertRevoke(fingerprint, "", "", 0)) is not None:  # the replicas' rule
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"--fingerprint: the sha256 of the certificate, "
                             f"{CERT_FINGERPRINT_CHARS} hex digits (colons allowed), got "
                             f"{args.fingerprint!r}")
    return fingerprint, args.subject or ""


def _run_revoke(args: argparse.Namespace) -> int:
    fingerprint, subject = _target(args)
    with connect(args) as client:
        reply = client.revoke_certificate(fingerprint, subject, args.reason)
    if args.json:
        print_json({"fingerprint": reply.fingerprint, "subject": subject,
                    "created": reply.created})
    else:
        what = f"certificate {subject or '(no subject given)'} (sha256 {reply.fingerprint})"
        print(f"revoked {what}" if reply.created else f"{what} was revoked already")
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        reply = client.list_revoked_certificates()
    rows = [{"fingerprint": r.fingerprint, "subject": r.subject, "reason": r.reason,
             "revoked_ms": r.revoked_ms} for r in reply.certificates]
    if args.json:
        print_json(rows)
    else:
        print(render.table(["FINGERPRINT (SHA256)", "SUBJECT", "REVOKED", "REASON"],
                           [[r["fingerprint"], r["subject"], render.format_time_ms(
                               r["revoked_ms"]), r["reason"]] for r in rows]))
    return EXIT_OK
