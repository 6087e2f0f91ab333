"""Team provisioning for a tournament night: one step makes a team's broker
login and its game secret.

Two files, both plain text an organiser can inspect:

- the broker's password file (mosquitto's ``$7$`` format: PBKDF2-SHA512,
  101 iterations, 12-byte salt — what ``mosquitto_passwd`` writes), with one
  line per team plus the referee's own login;
- the referee's team registry (JSON): per team an argon2id hash of the game
  secret. ``salvo referee --teams FILE`` admits only these teams, and only
  with the right secret.

Secrets are generated here, printed once on the team's connection card, and
stored only as hashes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from salvo.topics import name_error

#: What mosquitto_passwd uses for ``$7$`` hashes.
PBKDF2_ITERATIONS = 101
SALT_BYTES = 12
#: The referee's own broker login (see mosquitto.acl).
REFEREE_USER = "referee"

_hasher = PasswordHasher()


class TeamsError(Exception):
    """A registry or password file problem, with a message for the organiser."""


class TeamRefused(Exception):
    """A join the registry does not allow; the message is the wire reason."""


def mosquitto_hash(password: str, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """A mosquitto ``$7$`` password hash, as mosquitto_passwd writes it."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def mosquitto_verify(password: str, encoded: str) -> bool:
    try:
        _, kind, iterations, salt, _digest = encoded.split("$")
        if kind != "7":
            return False
        expected = mosquitto_hash(password, base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    return secrets.compare_digest(expected, encoded)


def new_secret() -> str:
    """A fresh password or game secret: 128 bits, URL- and shell-safe."""
    return secrets.token_urlsafe(16)


# -- the broker's password file ---------------------------------------------------------


def read_passwd(path: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                user, _, encoded = line.partition(":")
                entries[user] = encoded
    return entries


def write_passwd(path: Path, entries: dict[str, str]) -> None:
    # mosquitto (another user in its container) must be able to read it: the
    # lines are salted hashes, not secrets.
    _write_atomically(path, "".join(f"{u}:{h}\n" for u, h in entries.items()), 0o644)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# -- the referee's registry ---------------------------------------------------------------


@dataclass(frozen=True)
class Team:
    name: str
    secret_hash: str
    added: str


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
                name: Team(name, entry["secret"], entry.get("added", ""))
                for name, entry in raw.get("teams", {}).items()
            }
        except (ValueError, AttributeError, KeyError, TypeError) as err:
            raise TeamsError(f"{self.path}: not a salvo team registry ({err})") from err
        self._teams, self._mtime = teams, (stat.st_ino, stat.st_mtime_ns)

    @property
    def teams(self) -> dict[str, Team]:
        with self._lock:
            self._reload()
            return dict(self._teams)

    def check_name(self, name: str) -> str | None:
        """Why ``name`` may not join (None: it may, if the secret is right)."""
        if name not in self.teams:
            return f"{name!r} is not a registered team of this tournament (ask the organisers)"
        return None

    def verify(self, name: str, secret: str) -> None:
        """Raise :class:`TeamRefused` unless ``secret`` is ``name``'s. Slow
        (argon2id): call it off the message thread."""
        team = self.teams.get(name)
        if team is None:
            raise TeamRefused(f"{name!r} is not a registered team of this tournament (ask the organisers)")
        try:
            _hasher.verify(team.secret_hash, secret)
        except (VerificationError, InvalidHashError):
            raise TeamRefused(f"wrong secret for team {name!r}") from None

    def save(self, teams: dict[str, Team]) -> None:
        body = {"version": 1, "teams": {t.name: {"secret": t.secret_hash, "added": t.added} for t in teams.values()}}
        with self._lock:
            _write_atomically(self.path, json.dumps(body, indent=2) + "\n", 0o600)
            self._mtime = None


# -- the operations behind `salvo teams` -------------------------------------------------------


@dataclass(frozen=True)
class Card:
    """What a team gets: everything to connect and play."""

    name: str
    mqtt_password: str
    secret: str
    broker: str

    def text(self) -> str:
        return (
            f"team:          {self.name}\n"
            f"broker:        {self.broker}\n"
            f"MQTT username: {self.name}\n"
            f"MQTT password: {self.mqtt_password}\n"
            f"game secret:   {self.secret}\n"
            f"try it:        salvo bot --broker {self.broker} --username {self.name} "
            f"--password {self.mqtt_password} --name {self.name} --secret {self.secret}\n"
        )


def add_team(
    registry: Path,
    passwd: Path,
    name: str,
    *,
    broker: str = "mqtt://localhost:1883",
    mqtt_password: str | None = None,
    secret: str | None = None,
    replace: bool = False,
) -> Card:
    if err := name_error(name, "team name"):
        raise TeamsError(err)
    if name == REFEREE_USER:
        raise TeamsError(f"{REFEREE_USER!r} is the referee's login; pick another team name")
    reg = Registry(registry)
    teams = reg.teams
    if name in teams and not replace:
        raise TeamsError(f"team {name!r} exists already (use --replace to issue new credentials)")
    mqtt_password = mqtt_password or new_secret()
    secret = secret or new_secret()
    teams[name] = Team(name, _hasher.hash(secret), datetime.now(UTC).isoformat(timespec="seconds"))
    entries = read_passwd(passwd)
    entries[name] = mosquitto_hash(mqtt_password)
    reg.save(teams)
    write_passwd(passwd, entries)
    return Card(name, mqtt_password, secret, broker)


def remove_team(registry: Path, passwd: Path, name: str) -> None:
    reg = Registry(registry)
    teams = reg.teams
    entries = read_passwd(passwd)
    if name not in teams and name not in entries:
        raise TeamsError(f"no team {name!r}")
    teams.pop(name, None)
    if name != REFEREE_USER:
        entries.pop(name, None)
    reg.save(teams)
    write_passwd(passwd, entries)


def set_referee_login(passwd: Path, password: str | None = None) -> str:
    """Create or change the referee's broker login; returns the password."""
    password = password or new_secret()
    entries = read_passwd(passwd)
    entries[REFEREE_USER] = mosquitto_hash(password)
    write_passwd(passwd, entries)
    return password
