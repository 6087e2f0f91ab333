"""Admission: which teams may join, checked against the team registry.

The referee's side of ``salvo teams``: the registry (JSON; per team a keyed
BLAKE2b verifier of the game secret, or an argon2id hash in registries
written before the verifier), re-read when it changes, and a join's secret
checked against it. Writing the broker's password file, its ACL and the
teams' cards is the organiser's (:mod:`salvo.organiser.teams`), which saves
the registry through this module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from salvo.arena.arena import DeriveKey
from salvo.failures import Failure
from salvo.spec import crypto
from salvo.spec.errors import Code, Illegal

_VERIFIER_PERSON = b"salvo-team"
_hasher = PasswordHasher()


class TeamsError(Failure):
    """A registry or password file problem, with a message for the organiser."""


def secret_verifier(secret: str, salt: bytes | None = None) -> str:
    """``b2$<salt>$<digest>``: keyed BLAKE2b-256 of a game secret."""
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.blake2b(secret.encode(), key=salt, person=_VERIFIER_PERSON, digest_size=32).digest()
    return f"b2${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verifier_matches(secret: str, verifier: str) -> bool:
    try:
        kind, salt, _digest = verifier.split("$")
        if kind != "b2":
            return False
        expected = secret_verifier(secret, base64.b64decode(salt, validate=True))
    except ValueError:
        return False
    return hmac.compare_digest(expected, verifier)


def write_atomically(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Team:
    name: str
    #: argon2id hash of the secret (registries written before the verifier)
    secret_hash: str
    added: str
    #: keyed BLAKE2b of the secret (see secret_verifier); "" in old registries
    verifier: str = ""


class Registry:
    """The registered teams, read from a JSON file. Thread-safe; re-reads the
    file when it changed, so teams added during the evening can join without
    a referee restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        # (inode, mtime): every save is a new file (atomic replace).
        self._mtime: tuple[int, int] | None = None
        self._teams: dict[str, Team] = {}
        if path.exists():
            self._reload()

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._teams, self._mtime = {}, None
            return
        if (stat.st_ino, stat.st_mtime_ns) == self._mtime:
            return
        try:
            raw: Any = json.loads(self.path.read_text())
            teams = {
                name: Team(name, entry.get("secret", ""), entry.get("added", ""), entry.get("verifier", ""))
                for name, entry in raw.get("teams", {}).items()
            }
            if not all(t.secret_hash or t.verifier for t in teams.values()):
                raise KeyError("a team without a secret")
        except (ValueError, AttributeError, KeyError, TypeError) as err:
            raise TeamsError(f"{self.path}: not a salvo team registry ({err})") from err
        self._teams, self._mtime = teams, (stat.st_ino, stat.st_mtime_ns)

    @property
    def teams(self) -> dict[str, Team]:
        with self._lock:
            self._reload()
            return dict(self._teams)

    def _team(self, name: str) -> Team:
        team = self.teams.get(name)
        if team is None:
            raise Illegal(
                Code.NOT_REGISTERED, f"{name!r} is not a registered team of this tournament (ask the organisers)"
            )
        return team

    def admit(self, name: str, secret: str) -> bool | None:
        """May ``name`` join with ``secret``? Raises Illegal (not registered,
        wrong secret); True when the secret was verified (microseconds);
        None when only :meth:`verify` can tell (an old argon2id entry)."""
        team = self._team(name)
        if not team.verifier:
            return None
        if not verifier_matches(secret, team.verifier):
            raise Illegal(Code.WRONG_SECRET, f"wrong secret for team {name!r}")
        return True

    def verify(self, name: str, secret: str) -> None:
        """Raise Illegal unless ``secret`` is ``name``'s. Slow for an old
        argon2id entry: call it off the message thread."""
        team = self._team(name)
        if team.verifier:
            self.admit(name, secret)
            return
        try:
            _hasher.verify(team.secret_hash, secret)
        except (VerificationError, InvalidHashError):
            raise Illegal(Code.WRONG_SECRET, f"wrong secret for team {name!r}") from None

    def save(self, teams: dict[str, Team]) -> None:
        entries = {}
        for t in teams.values():
            entry = {"verifier": t.verifier} if t.verifier else {"secret": t.secret_hash}
            entries[t.name] = {**entry, "added": t.added}
        body = {"version": 2, "teams": entries}
        with self._lock:
            write_atomically(self.path, json.dumps(body, indent=2) + "\n", 0o600)
            self._mtime = None


def team_key(registry: Registry | None, job: DeriveKey) -> bytes:
    """On a pool thread: check a registered team's secret when the registry
    could not at once (an old entry: argon2id), then derive its team key
    (argon2id; the spec's KDF)."""
    if registry is not None and job.verify:
        registry.verify(job.name, job.secret)
    return crypto.derive_team_key(job.name, job.secret)
