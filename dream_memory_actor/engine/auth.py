"""Who may use which owners: the token map the doors check (the MCP server over HTTP,
the review pages), and the loopback rule of a door that has none.

The token map holds only SHA-256 hashes of the tokens (hex), each with the owners
it grants (``"*"``: every owner) and an optional name recorded as the decider of
confirmations and rejections. As JSON or YAML, in a file or in the environment
variable ``DREAM_MEMORY_MCP_TOKENS``::

    {"tokens": {
        "<sha256 hex of token 1>": ["alice", "team-infra"],
        "<sha256 hex of token 2>": {"owners": ["*"], "name": "ops"}}}

(the outer ``"tokens"`` key may be left out). Make a hash with
``python -m dream_memory_actor.mcp --hash-token`` (reads the token on stdin).

A presented token is hashed and compared with every stored hash in constant time
(``hmac.compare_digest``, no early exit). Without tokens (the MCP server over stdio,
the review pages of the local user) the local user owns the process and may use
every owner, so such a door serves this machine's loopback only.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import validation as check
from ..errors import ConfigurationError, DreamMemoryError, InvalidInput

ENV_VAR = "DREAM_MEMORY_MCP_TOKENS"
ALL_OWNERS = "*"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class AccessDenied(DreamMemoryError):
    """The caller's token does not grant this owner."""


def hash_token(token: str) -> str:
    """The SHA-256 hex digest under which ``token`` is stored in the token map."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Grant:
    """What one token may do: the owners it may read and write."""

    name: str
    owners: frozenset[str]

    @property
    def all_owners(self) -> bool:
        return ALL_OWNERS in self.owners

    def check(self, owners: Iterable[str]) -> None:
        """Raise ``AccessDenied`` unless every owner in ``owners`` is granted."""
        if self.all_owners:
            return
        refused = sorted(set(owners) - self.owners)
        if refused:
            raise AccessDenied(f"this token may not access owner(s) {refused}")

    def owner(self, owner: object) -> str:
        """``owner`` checked (``InvalidOwnerId``) and granted (``AccessDenied``)."""
        checked = check.owner_id(owner)
        self.check([checked])
        return checked


#: The grant without tokens: the local user owns the process.
LOCAL = Grant(name="local", owners=frozenset({ALL_OWNERS}))


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class TokenMap:
    """Hashed tokens -> grants. Holds no plain tokens."""

    def __init__(self, grants: Mapping[str, Grant]) -> None:
        self._grants = dict(grants)

    def __len__(self) -> int:
        return len(self._grants)

    @classmethod
    def parse(cls, data: object) -> TokenMap:
        """Build from the decoded JSON/YAML described in the module docstring."""
        if isinstance(data, Mapping) and set(data) == {"tokens"}:
            data = data["tokens"]
        if not isinstance(data, Mapping):
            raise ConfigurationError("the MCP token map must be a mapping of sha256 hex -> owners")
        grants: dict[str, Grant] = {}
        for digest, value in data.items():
            if not isinstance(digest, str) or not _HEX64.fullmatch(digest.lower()):
                raise ConfigurationError(
                    "MCP token map keys must be SHA-256 hex digests of the tokens, not tokens")
            grants[digest.lower()] = _grant(digest.lower(), value)
        return cls(grants)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenMap:
        """Read a JSON or YAML token map file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the MCP token map {str(path)!r}: {exc}") from exc
        return cls.parse(_decode(text, str(path)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenMap | None:
        """The map in ``DREAM_MEMORY_MCP_TOKENS`` (JSON or YAML text), or ``None``."""
        text = (os.environ if environ is None else environ).get(ENV_VAR)
        return None if not text else cls.parse(_decode(text, ENV_VAR))

    def verify(self, token: str) -> Grant | None:
        """The grant of ``token``, or ``None``; compares against every hash in constant time."""
        digest = hash_token(token).encode("ascii")
        found: Grant | None = None
        for stored, grant in self._grants.items():
            if hmac.compare_digest(digest, stored.encode("ascii")):
                found = grant
        return found


def _decode(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"the MCP token map in {where} is not JSON or YAML") from exc


def _grant(digest: str, value: object) -> Grant:
    name = f"token:{digest[:8]}"
    owners: object = value
    if isinstance(value, Mapping):
        owners = value.get("owners")
        name = str(value.get("name") or name)
    if isinstance(owners, str) or not isinstance(owners, Iterable):
        raise ConfigurationError(
            f"token {digest[:8]}...: owners must be a list of owner ids or '*'")
    checked: set[str] = set()
    for o in owners:
        if o == ALL_OWNERS:
            checked.add(ALL_OWNERS)
            continue
        try:
            checked.add(check.owner_id(o))
        except InvalidInput as exc:
            raise ConfigurationError(f"token {digest[:8]}...: {exc}") from exc
    if not checked:
        raise ConfigurationError(f"token {digest[:8]}... grants no owner")
    return Grant(name=name[:64], owners=frozenset(checked))
