"""One arena's referee without IO: raw MQTT messages in, effects out.

:class:`Arena` takes ``(topic, payload, now)``, parses the topic
(:mod:`salvo.topics`), decodes and decrypts the payload (:mod:`salvo.wire`,
:mod:`salvo.crypto`), hands a typed event to the engine and returns effects:

* :class:`~salvo.engine.Publish` - send this (QoS 1);
* :class:`Record` - persist this accepted event *before* publishing what
  follows it, so nothing a player was told is lost;
* :class:`DeriveKey` - run argon2id somewhere slow work may run, then call
  :meth:`Arena.on_key`;
* :class:`Log` - one readable line per accepted or rejected message.

Rejections become error reports here and only here (:meth:`Arena._report`).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import nacl.hash
from nacl.encoding import RawEncoder
from nacl.public import PrivateKey

from salvo import codec, crypto, wire
from salvo.engine import Accepted, CloseLobby, Config, Configure, Event, Fire, Game, Join, Place, Publish, Result, Tick
from salvo.errors import Illegal, Malformed, Rejection
from salvo.topics import NAME_RE, Inbound, Route, name_error

KEY_CACHE_SIZE: Final = 512


class Record(NamedTuple):
    """An accepted event to persist before the publishes that follow it,
    with the number of the game it was applied to (a reset tick ends one).
    (NamedTuples, this and Log: one of each per message, like Publish.)"""

    event: Event
    game_no: int


@dataclass(frozen=True, slots=True)
class DeriveKey:
    """Derive ``name``'s team key from ``secret`` off the message thread, then
    feed the key back through :meth:`Arena.on_key`."""

    name: str
    secret: str = field(repr=False)
    digest: bytes = field(repr=False)


class Log(NamedTuple):
    """One log line: ``text % args`` when there are args, formatted only
    when the line is logged (the referee's own log level may be above it)."""

    accepted: bool
    text: str
    args: tuple[object, ...] = ()

    @property
    def line(self) -> str:
        return self.text % self.args if self.args else self.text


Effect = Publish | Record | DeriveKey | Log


def _printable(topic: str, limit: int = 120) -> str:
    shown = topic if topic.isprintable() else ascii(topic)[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "..."


class Arena:
    """The referee of one arena (one topic prefix)."""

    def __init__(self, game: Game, referee_key: PrivateKey, *, max_pending: int | None = None) -> None:
        self.game = game
        self.topics = game.topics
        self._referee_key = referee_key
        self.pubkey = crypto.public_key_b64(referee_key)
        # Derivations in flight, by digest, so a repeated request is not derived twice.
        self._pending: dict[bytes, DeriveKey] = {}
        self._max_pending = max_pending or 2 * game.config.max_players + 8
        # Recently derived keys. The digest is keyed with a per-process secret so
        # this memory is no offline guessing aid for weak secrets.
        self._keys: OrderedDict[bytes, bytes] = OrderedDict()
        self._digest_key = os.urandom(32)
        #: Who may join at all (a tournament's registered teams): returns why
        #: not, or None. The secret is checked with the key derivation.
        self.admit: Callable[[str], str | None] | None = None

    # -- entry points -----------------------------------------------------------

    def presence(self) -> list[Publish]:
        """Everything retained this arena owns: after (re)connecting, publish it all."""
        t = self.topics
        # "up" last: whoever waits for it finds the rest in place.
        out = [Publish(topic, payload, True) for topic, payload in self.game.retained.items()]
        return [*out, Publish(t.pubkey, self.pubkey, True), Publish(t.server, "up", True)]

    def next_deadline(self) -> float | None:
        return self.game.next_deadline()

    def on_tick(self, now: float) -> list[Effect]:
        ev = Tick(now)
        game_no = self.game.game_no
        result = self.game.handle(ev)
        if isinstance(result, Accepted) and result.effects:
            return [Record(ev, game_no), *result.effects, Log(True, f"timer: {result.summary}")]
        return []

    def configure(self, config: Config, now: float) -> list[Effect]:
        """Switch to new settings (journaled, so replays switch at the same point)."""
        ev = Configure(config, now)
        game_no = self.game.game_no
        self.game.handle(ev)
        return [Record(ev, game_no), Log(True, f"settings changed to {config}")]

    def close_lobby(self, reason: str, now: float) -> list[Effect]:
        """Send everybody in the lobby away; nothing (but a log line) once the
        game has started."""
        ev = CloseLobby(reason, now)
        game_no = self.game.game_no
        result = self.game.handle(ev)
        if isinstance(result, Accepted):
            return [Record(ev, game_no), *result.effects, Log(True, result.summary)]
        return [Log(False, f"lobby not closed: {result.error}")]

    def on_message(self, topic: str, payload: bytes, now: float) -> list[Effect]:
        route = self.topics.parse_inbound(topic)
        if route is None:
            return self._report(topic, None, Malformed("not a topic the referee reads"), None)
        player: str | None = None
        try:
            if route.kind is Inbound.PLACE:
                if err := name_error(route.name):
                    raise Malformed(err)
                player = route.name
            if len(payload) > codec.MAX_PAYLOAD:
                raise Malformed(f"payload too large: {len(payload)} bytes, limit {codec.MAX_PAYLOAD}")
            if route.kind is Inbound.FIRE:
                return self._fire(topic, route, payload, now)
            if route.kind is Inbound.PLACE:
                return self._place(topic, route, payload, now)
            value = self._open_join(payload)
            player = self._join_name(value)
            return self._join(topic, route, value, player, now)
        except Rejection as err:
            return self._report(topic, route, err, player)

    def on_key(self, job: DeriveKey, key: bytes, now: float) -> list[Effect]:
        """A derivation requested by a :class:`DeriveKey` effect finished."""
        self._pending.pop(job.digest, None)
        self._keys[job.digest] = key
        while len(self._keys) > KEY_CACHE_SIZE:
            self._keys.popitem(last=False)
        topic = self.topics.request_participation
        return self._apply(topic, Route(Inbound.JOIN), Join(job.name, key, now), job.name)

    def on_key_failed(self, job: DeriveKey, reason: str) -> list[Effect]:
        self._pending.pop(job.digest, None)
        topic = self.topics.request_participation
        return self._report(topic, Route(Inbound.JOIN), Illegal(reason), job.name)

    # -- per topic family --------------------------------------------------------------

    @staticmethod
    def _join_name(value: object) -> str:
        """Who sent a participation request: from here on, errors go to that
        team's own error topic."""
        name = value.get("name") if isinstance(value, dict) else None
        if not isinstance(name, str):
            raise Malformed('invalid participation request: "name" must be a string')
        if err := name_error(name):
            raise Malformed(err)
        return name

    def _open_join(self, payload: bytes) -> object:
        # Base64 never starts with "{" or "[": anything else must be a sealed box.
        if payload.lstrip()[:1] in (b"{", b"["):
            return codec.loads(payload, "participation request")
        try:
            plaintext = crypto.open_sealed_request(self._referee_key, payload)
        except Malformed as err:
            raise Malformed(f"participation request is neither JSON nor a sealed box: {err.reason}") from None
        return codec.loads(plaintext, "sealed participation request")

    def _join(self, topic: str, route: Route, value: object, name: str, now: float) -> list[Effect]:
        request = wire.parse_join(value)
        self.game.check_join(name)  # fail fast before paying for a derivation
        if self.admit is not None and (why := self.admit(name)):
            raise Illegal(why)
        digest = nacl.hash.blake2b(f"{name}\0{request.secret}".encode(), key=self._digest_key, encoder=RawEncoder)
        key = self._keys.get(digest)
        if key is not None:
            return self._apply(topic, route, Join(name, key, now), name)
        if digest in self._pending:
            return [Log(True, f"join {name}: already deriving its key")]
        if len(self._pending) >= self._max_pending:
            raise Illegal("referee busy: too many joins in progress, try again shortly")
        job = DeriveKey(name, request.secret, digest)
        self._pending[digest] = job
        return [job, Log(True, f"join {name}: deriving key")]

    def _place(self, topic: str, route: Route, payload: bytes, now: float) -> list[Effect]:
        player = self.game.check_place(route.name, route.ship)
        plaintext = crypto.unseal(player.key, payload, "placement", "your team")
        placement = wire.parse_placement(codec.loads(plaintext, "placement"))
        return self._apply(topic, route, Place(route.name, route.ship, placement, now), route.name)

    def _fire(self, topic: str, route: Route, payload: bytes, now: float) -> list[Effect]:
        key = self.game.current_key()
        if key is None:
            raise Illegal(f"not in a turn (state {self.game.phase.value})")
        if err := name_error(route.name, "target name"):
            raise Malformed(err)
        signed = wire.parse_signed(codec.loads(payload, "fire message"))
        nonce = crypto.verify(key, signed.data, signed.signature)
        data = wire.parse_fire(signed.data)
        return self._apply(topic, route, Fire(route.name, data.x, data.y, data.turn, nonce, now), None)

    # -- results and the one place errors are mapped to topics ---------------------------

    def _apply(self, topic: str, route: Route, event: Event, player: str | None) -> list[Effect]:
        game_no = self.game.game_no
        result: Result = self.game.handle(event)
        if isinstance(result, Accepted):
            kind = route.kind.value
            return [
                Record(event, game_no),
                *result.effects,
                Log(True, "accept %s %s: %s", (kind, _printable(topic), result)),
            ]
        return self._report(topic, route, result.error, player)

    def _error_topic(self, route: Route | None, player: str | None) -> str:
        t = self.topics
        if route is None:
            return t.errors
        if route.kind is Inbound.FIRE:
            # Only the current player can fire: the reason goes to them.
            current = self.game.current
            return t.player_error(current) if current else t.errors
        if player is None:
            return t.errors
        # The ship level is echoed into a topic only when it is a plain name.
        if route.kind is Inbound.PLACE and NAME_RE.fullmatch(route.ship):
            return t.ship_error(player, route.ship)
        return t.player_error(player)

    def _report(self, topic: str, route: Route | None, err: Rejection, player: str | None) -> list[Effect]:
        where = self._error_topic(route, player)
        kind = route.kind.value if route else "message"
        return [
            Publish(where, codec.error_report(topic, err.reason, err.kind), False, expendable=True),
            Log(False, f"reject {kind} {_printable(topic)}: {err.kind}: {err.reason} -> {where}"),
        ]
