"""Team provisioning for a tournament night: one step makes a team's broker
login and its game secret.

Three files, all plain text an organiser can inspect:

- the broker's password file (mosquitto's ``$7$`` format: PBKDF2-SHA512,
  101 iterations, 12-byte salt — what ``mosquitto_passwd`` writes), with one
  line per team plus the referee's own login;
- the broker's ACL next to it (:func:`render_acl`, spec section 9), generated
  from the password file's logins: mosquitto 2.0 gives logged-in users the
  public topics only through a section of their own;
- the referee's team registry (JSON, :mod:`salvo.referee.admission`): per
  team a keyed BLAKE2b verifier of the game secret. ``salvo referee --teams FILE`` admits only these teams,
  and only with the right secret.

Secrets are generated here (128 random bits), printed once on the team's
connection card, and stored only as verifiers. The verifier is fast on
purpose: a join with a wrong secret is refused in microseconds, without the
argon2id derivation a flood of wrong guesses could otherwise keep busy
(docs/security.md). A fast hash is safe for a 128-bit random secret; an
organiser's own secret must therefore be at least MIN_SECRET_CHARS long.
Registries written before the verifier hold an argon2id hash instead, which
the referee checks on its key-derivation pool.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from salvo.referee.admission import Registry, Team, TeamsError, secret_verifier, write_atomically
from salvo.spec.payloads import PROTOCOL_VERSION
from salvo.spec.topics import TournamentTopics, access_filters, name_error

#: What mosquitto_passwd uses for ``$7$`` hashes.
PBKDF2_ITERATIONS = 101
SALT_BYTES = 12
#: The referee's own broker login (see mosquitto.acl).
REFEREE_USER = "referee"
#: An organiser's own game secret must be at least this long (see above).
MIN_SECRET_CHARS = 16


def mosquitto_hash(password: str, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """A mosquitto ``$7$`` password hash, as mosquitto_passwd writes it."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


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


def referee_passwd_path(passwd: Path) -> Path:
    """The referee's own password file beside ``passwd``: its login alone,
    for the broker's referees' listener (mosquitto.conf, 8884)."""
    return passwd.with_name("referee.passwd")


def write_passwd(path: Path, entries: dict[str, str]) -> None:
    # 0600: mosquitto reads it as its owner (uid 1883 in Docker, which owns
    # data/; natively the organiser's own user), and mosquitto 2.0.16+ warns
    # about (2.1 refuses) a password file others may read.
    write_atomically(path, "".join(f"{u}:{h}\n" for u, h in entries.items()), 0o600)


# -- the broker's ACL ------------------------------------------------------------------------

_ACL_HEADER = """\
# salvo broker ACL (spec section 9). GENERATED: do not edit by hand.
# `salvo teams add/remove/referee` rewrite it next to the password file;
# after editing the password file otherwise, regenerate it with
#   salvo teams acl --passwd PASSWD --acl THIS_FILE
# then make mosquitto re-read both: SIGHUP (docker compose kill -s HUP mosquitto).
#
# How mosquitto 2.0's default ACL reads this file:
# - "pattern" lines apply to every login, wherever they stand; %u is the
#   login's username, and a pattern with %u never matches an anonymous client.
#   Patterns without %u would make mosquitto warn at every start: none here.
# - "topic" lines before the first "user" line are anonymous clients' rights;
# - "topic" lines after "user NAME" are that login's rights (a login without a
#   section has only the patterns): hence one section per team.
# Every rule exists for each arena the "arenas:" line below names ("-": the
# unprefixed one; "any": the unprefixed one and every first level, /+/...).
# Naming them closes a gap: with "any", a team may also write (retained)
# join, fire and placement messages into namespaces no referee reads, which
# the broker then keeps (salvo teams acl --arenas arena1,arena2).
# Nobody but the referee reads /game/request_participation or any fire topic.
"""
#: The line of the header that says which arena prefixes the rules cover.
_ARENAS_LINE = "# arenas: "
ANY_ARENA = "any"
#: The unprefixed arena (/game/...) in an arena list.
UNPREFIXED = "-"


def render_acl(teams: Iterable[str] = (), arenas: Sequence[str] | None = None) -> str:
    """mosquitto's acl_file for these team logins (plus the referee and
    anonymous spectators), for exactly the arenas named by ``arenas`` (""
    the unprefixed one; None: the unprefixed one and any prefix at all).
    Raises ValueError for a name no team or arena can have."""
    if arenas is None:
        roots = [access_filters(), access_filters(any_prefix=True)]
    else:
        for prefix in arenas:
            if prefix and (err := name_error(prefix, "arena prefix")):
                raise ValueError(f"{prefix!r}: {err}")
        roots = [access_filters(prefix=p) for p in dict.fromkeys(arenas)]
    public = [f for r in roots for f in r.public] + list(TournamentTopics.public_filters())
    covered = ANY_ARENA if arenas is None else ",".join(p or UNPREFIXED for p in dict.fromkeys(arenas))
    lines = [_ACL_HEADER + _ARENAS_LINE + covered + "\n", "# -- every team: its own placements and private topics"]
    lines += [f"pattern write {f}" for r in roots for f in r.own_write]
    lines += [f"pattern read {f}" for r in roots for f in r.own_read]
    lines += ["", "# -- anonymous spectators: the public topics, read-only"]
    lines += [f"topic read {f}" for f in public]
    lines += ["", "# -- the referee: everything", f"user {REFEREE_USER}", "topic readwrite #"]
    for name in sorted(set(teams) - {REFEREE_USER}):
        if err := name_error(name):
            raise ValueError(f"{name!r}: {err}")
        lines += ["", f"# -- team {name}: the public topics; join; fire at anyone", f"user {name}"]
        lines += [f"topic read {f}" for f in public]
        lines += [f"topic write {f}" for r in roots for f in r.team_write]
    return "\n".join(lines) + "\n"


def acl_arenas(acl: Path) -> list[str] | None:
    """The arena prefixes an existing ACL covers (None: any, or no file)."""
    try:
        text = acl.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith(_ARENAS_LINE):
            value = line[len(_ARENAS_LINE) :].strip()
            return None if value == ANY_ARENA else ["" if p == UNPREFIXED else p for p in value.split(",") if p]
    return None


def default_acl_path(passwd: Path) -> Path:
    """Where the ACL lives unless told: next to the password file."""
    return passwd.with_name("mosquitto.acl")


#: "The arenas the ACL file covers now", for :func:`write_acl_from_passwd`.
KEEP: Final = ("keep",)


def write_acl_from_passwd(
    passwd: Path, acl: Path | None = None, arenas: Sequence[str] | None = KEEP
) -> tuple[Path, list[str]]:
    """Rewrite the ACL for every login of the password file (all but the
    referee are teams), for ``arenas`` (None: any prefix; KEEP: those the
    file covers now), and the referee's own password file beside it.
    Returns the ACL's path and the logins left without rights because they
    cannot be team names. FileNotFoundError without a password file: an ACL
    without its logins would shut every team out."""
    if not passwd.exists():
        raise FileNotFoundError(f"no password file at {passwd}")
    path, entries = acl or default_acl_path(passwd), read_passwd(passwd)
    skipped = _write_acl(path, entries, arenas)
    _write_referee_passwd(passwd, entries)
    return path, skipped


def _write_acl(path: Path, logins: Iterable[str], arenas: Sequence[str] | None = KEEP) -> list[str]:
    teams = [u for u in logins if u != REFEREE_USER]
    skipped = sorted(u for u in teams if name_error(u))
    covered = acl_arenas(path) if arenas is KEEP else arenas
    write_atomically(path, render_acl((u for u in teams if u not in skipped), covered), 0o600)
    return skipped


# -- the referee's registry ---------------------------------------------------------------


# -- the operations behind `salvo teams` -------------------------------------------------------


@dataclass(frozen=True)
class Card:
    """What a team gets: everything to connect and play. Over TLS, also what
    verifies the broker: the organisers' CA file (handed out with the card)
    and its SHA-256 fingerprint, to check that file came from them."""

    name: str
    mqtt_password: str
    secret: str
    broker: str
    #: the CA file's name as handed out (None: the system's CAs, or no TLS)
    ca_file: str | None = None
    ca_fingerprint: str | None = None
    #: the arena of the card's free-play line (a referee with --arenas has no unprefixed one)
    arena: str = "arena1"

    def text(self) -> str:
        tls = ""
        if self.ca_file:
            tls = (
                f"CA file:       {self.ca_file} (from the organisers: it verifies the broker)\n"
                f"CA SHA-256:    {self.ca_fingerprint}\n"
                f"               (check: openssl x509 -noout -fingerprint -sha256 -in {self.ca_file})\n"
            )
        return (
            f"team:          {self.name}\n"
            f"broker:        {self.broker}\n"
            f"{tls}"
            f"MQTT username: {self.name}\n"
            f"MQTT password: {self.mqtt_password}\n"
            f"game secret:   {self.secret}\n"
            f"try it:        {self._bot_line('--tournament')}\n"
            f"               (at the tournament: plays wherever /tournament/assignments/{self.name} says)\n"
            f"free play:     {self._bot_line(f'--prefix {shlex.quote(self.arena)}')}\n"
        )

    def as_json(self) -> dict[str, object]:
        """The card for a team's automation (``salvo teams add --json``):
        everything its client's configuration needs, nothing to scrape."""
        return {
            "card": 1,  # this layout's version
            "team": self.name,
            "brokers": [self.broker],  # connect to any; on a cut, to the next
            "tls": is_tls_url(self.broker),
            "username": self.name,
            "mqtt_password": self.mqtt_password,
            "secret": self.secret,
            # the CA file as handed out with the card, and its SHA-256 (None: the system's CAs)
            "ca_file": self.ca_file,
            "ca_sha256": self.ca_fingerprint,
            "arena": self.arena,  # free play: the topic prefix of this arena
            "tournament": TournamentTopics.assignment(self.name),  # where a tournament says where to play
            "protocol": PROTOCOL_VERSION,
        }

    def _bot_line(self, where: str) -> str:
        """``salvo bot`` as this team, the two secrets in its environment
        (not on its command line, which ``ps`` shows to everybody)."""
        ca_option = f" --ca-file {shlex.quote(self.ca_file)}" if self.ca_file else ""
        return (
            f"SALVO_PASSWORD={shlex.quote(self.mqtt_password)} SALVO_SECRET={shlex.quote(self.secret)} "
            f"salvo bot {where} --broker {shlex.quote(self.broker)}{ca_option}"
            f" --username {self.name} --name {self.name}"
        )


def is_tls_url(broker: str) -> bool:
    """Whether a broker address is a TLS listener (the card then names a CA)."""
    return broker.startswith(("mqtts:", "ssl:", "wss:"))


def card_ca_file(broker: str, passwd: Path, ca_file: Path | None) -> Path | None:
    """The CA file for a team's card: as given, else for a TLS ``broker``
    where ``salvo tls`` puts it: ``data/tls/ca.crt`` beside the broker's
    directory ``data/broker/`` that holds the password file (or tls/ca.crt
    next to the password file, the layout before), if there.
    FileNotFoundError for a given one that is not there."""
    if ca_file is None and is_tls_url(broker):
        found = [d / "tls" / "ca.crt" for d in (passwd.parent.parent, passwd.parent) if (d / "tls" / "ca.crt").exists()]
        ca_file = found[0] if found else None
    if ca_file is not None and not ca_file.exists():
        raise FileNotFoundError(f"no CA file at {ca_file} (make one with: salvo tls)")
    return ca_file


def add_team(
    registry: Path,
    passwd: Path,
    name: str,
    *,
    broker: str = "mqtts://localhost:8883",
    ca_file: Path | None = None,
    mqtt_password: str | None = None,
    secret: str | None = None,
    replace: bool = False,
    acl: Path | None = None,
) -> Card:
    """Register team ``name``: registry entry, broker login, ACL section.
    ``ca_file`` (for an mqtts:// or wss:// ``broker``) goes on the card with
    its fingerprint. ``acl`` defaults to :func:`default_acl_path`."""
    if err := name_error(name, "team name"):
        raise TeamsError(err)
    if name == REFEREE_USER:
        raise TeamsError(f"{REFEREE_USER!r} is the referee's login; pick another team name")
    reg = Registry(registry)
    teams = reg.teams
    if name in teams and not replace:
        raise TeamsError(f"team {name!r} exists already (use --replace to issue new credentials)")
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise TeamsError(
            f"a game secret must have at least {MIN_SECRET_CHARS} characters (or leave it out for a random one)"
        )
    ca_name = fingerprint = None
    if ca_file is not None and is_tls_url(broker):
        from salvo.organiser.tls import TlsError, certificate_fingerprint

        try:
            ca_name, fingerprint = ca_file.name, certificate_fingerprint(ca_file)
        except TlsError as exc:
            raise TeamsError(str(exc)) from None
    mqtt_password = mqtt_password or new_secret()
    secret = secret or new_secret()
    added = datetime.now(UTC).isoformat(timespec="seconds")
    teams[name] = Team(name, "", added, secret_verifier(secret))
    entries = read_passwd(passwd)
    entries[name] = mosquitto_hash(mqtt_password)
    reg.save(teams)
    _write_broker_files(passwd, entries, acl)
    arena = next(iter(acl_arenas(acl or default_acl_path(passwd)) or []), "arena1")
    return Card(name, mqtt_password, secret, broker, ca_name, fingerprint, arena)


def remove_team(registry: Path, passwd: Path, name: str, *, acl: Path | None = None) -> None:
    reg = Registry(registry)
    teams = reg.teams
    entries = read_passwd(passwd)
    if name not in teams and name not in entries:
        raise TeamsError(f"no team {name!r}")
    teams.pop(name, None)
    if name != REFEREE_USER:
        entries.pop(name, None)
    reg.save(teams)
    _write_broker_files(passwd, entries, acl)


def set_referee_login(passwd: Path, password: str | None = None, *, acl: Path | None = None) -> str:
    """Create or change the referee's broker login; returns the password."""
    password = password or new_secret()
    entries = read_passwd(passwd)
    entries[REFEREE_USER] = mosquitto_hash(password)
    _write_broker_files(passwd, entries, acl)
    return password


def _write_broker_files(passwd: Path, entries: dict[str, str], acl: Path | None) -> None:
    # The ACL first: a login in the password file always finds its rights.
    _write_acl(acl or default_acl_path(passwd), entries)
    write_passwd(passwd, entries)
    _write_referee_passwd(passwd, entries)


def _write_referee_passwd(passwd: Path, entries: dict[str, str]) -> None:
    """referee.passwd: the referee's line of ``entries``, nothing else."""
    only = {REFEREE_USER: entries[REFEREE_USER]} if REFEREE_USER in entries else {}
    write_passwd(referee_passwd_path(passwd), only)
