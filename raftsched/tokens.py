"""API tokens: their text form and the digest the replicated state keeps (never the secret).

A token reads `rst_<16 hex: its id>_<secret>`. The id names it in `admin token list/revoke` and in
logs; the replicas keep sha256(secret) only, so neither the Raft log, the snapshots nor a
replica's memory hold a usable token. Standard library only.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

TOKEN_PREFIX = "rst_"
TOKEN_ID_HEX = 16
TOKEN_SECRET_BYTES = 32
"""Random bytes in a secret (43 characters of URL-safe base64)."""
_TOKEN = re.compile(rf"{TOKEN_PREFIX}([0-9a-f]{{{TOKEN_ID_HEX}}})_([A-Za-z0-9_-]{{20,100}})")


@dataclass(frozen=True, slots=True)
class NewToken:
    token_id: str
    token: str
    """The whole secret token, to hand to its holder once."""
    digest: bytes


def new_token() -> NewToken:
    token_id = secrets.token_hex(TOKEN_ID_HEX // 2)
    secret = secrets.token_urlsafe(TOKEN_SECRET_BYTES)
    return NewToken(token_id, f"{TOKEN_PREFIX}{token_id}_{secret}", secret_digest(secret))


def parse_token(text: str) -> tuple[str, str] | None:
    """(token id, secret) of a well-formed token (surrounding whitespace ignored), else None."""
    match = _TOKEN.fullmatch(text.strip())
    return None if match is None else (match.group(1), match.group(2))


def secret_digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
