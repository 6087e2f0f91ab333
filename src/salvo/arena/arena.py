"""One arena's referee without IO: raw MQTT messages in, effects out.

:class:`Arena` takes ``(topic, payload, now)``, parses the topic
(:mod:`salvo.spec.topics`), decodes and decrypts the payload (:mod:`salvo.spec.wire`,
:mod:`salvo.spec.crypto`), hands a typed event to the engine and returns effects:

* :class:`~salvo.spec.payloads.Publish` - send this (QoS 1);
* :class:`Record` - persist this accepted event *before* publishing what
  follows it, so nothing a player was told is lost;
* :class:`DeriveKey` - run argon2id somewhere slow work may run, then call
  :meth:`Arena.on_key` (or :meth:`Arena.on_key_failed`). The message that
  asked for it is answered only then: its acknowledgement waits too (the
  same job object comes again for a repeat of the join while it runs);
* :class:`Log` - one readable line per accepted or rejected message.

Rules of this layer (protocol v2), before the engine's own:

* A fire message's sender is whoever's key opens its signature: the current
  player's is tried first, then every other player's of the game. Errors go
  to the sender's error topic; a signature that opens under no key, or a
  message without one, is reported on ``/game/errors``.
* Once a signature opened under a player's key its nonce is spent for the
  game, whether the shot is taken or not (a :class:`~salvo.game.events.Burn`,
  journaled). A redelivery of a signature that *was* a shot is ignored in
  silence: the broker sends unacknowledged messages again after a restart.
* Fire data must name its target, turn and game (``/game/id``); the v1 form
  ``{x, y}`` only with ``unbound_fire`` (unsafe, off by default).
* Every refused join is reported on ``/game/errors`` only, echoing the
  join's ``request_id``: the sender of a join has not proven who it is, so a
  refusal on ``/players/<name>/error`` would let anyone forge one.
* (v2.1) A join that names a ``game`` other than ``/game/id`` is refused
  ``wrong_game``; an invalid ``request_id`` that is a string is echoed cut
  to 64 characters. Every refusal of a readable signed fire message echoes
  the start of its signature and, when its data has them, its shot.
* Joins cannot starve each other: at most one key derivation in flight per
  name and :attr:`Arena.max_pending` in all, a short cool-down for a name
  after a wrong secret found by derivation, and keys already derived (or
  secrets a registry verifies at once) join without deriving.

Rejections become error reports here and only here (:meth:`Arena._report`).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple, TypeVar

import nacl.hash
from nacl.encoding import RawEncoder
from nacl.public import PrivateKey

from salvo.game.engine import Game
from salvo.game.events import (
    Abandon,
    Accepted,
    Burn,
    CloseLobby,
    Config,
    Configure,
    Event,
    Extend,
    Fire,
    Join,
    Pause,
    Phase,
    Place,
    Rejected,
    Resume,
    Tick,
)
from salvo.spec import codec, crypto, wire
from salvo.spec.errors import Code, Illegal, Malformed, Rejection
from salvo.spec.payloads import PROTOCOL_VERSION, TRUE, Publish
from salvo.spec.topics import NAME_RE, Inbound, Route, name_error

#: Keys derived recently, kept so a repeated join (a restart, a resend) is free.
KEY_CACHE_SIZE: Final = 512
#: Secrets found wrong by derivation, refused at once when they come again.
WRONG_CACHE_SIZE: Final = 4096
#: After a derivation finds a wrong secret, further joins for that name are
#: refused ("busy") this long without deriving: one name's wrong guesses
#: cannot keep the derivation pool busy.
WRONG_SECRET_COOLDOWN_S: Final = 1.0
#: Refusals sent for one join derivation at most (one per distinct request_id).
MAX_REQUEST_IDS: Final = 4


class Record(NamedTuple):
    """An accepted event to persist before the publishes that follow it,
    with the number of the game it was applied to (a reset tick ends one).
    (NamedTuples, this and Log: one of each per message, like Publish.)"""

    event: Event
    game_no: int


@dataclass(slots=True)
class DeriveKey:
    """Derive ``name``'s team key from ``secret`` off the message thread
    (first checking the secret against the team registry when ``verify``),
    then feed the key back through :meth:`Arena.on_key`."""

    name: str
    secret: str = field(repr=False)
    digest: bytes = field(repr=False)
    verify: bool = False
    #: the request ids of the joins waiting for this derivation
    request_ids: list[str] = field(default_factory=list)
    #: the game it was asked for: a join applies to that game only
    game_no: int = 0


#: The ``code`` of a log line about a message that changed nothing although
#: it was no error (a join repeated, a message delivered again): summarised
#: under a flood like rejections.
ROUTINE: Final = "routine"


class Log(NamedTuple):
    """One log line: ``text % args`` when there are args, formatted only
    when the line is logged (the referee's own log level may be above it).
    ``code`` is a rejection's (or ROUTINE), so a flood can be summarised by
    code; lines without one are always logged."""

    accepted: bool
    text: str
    args: tuple[object, ...] = ()
    code: str | None = None

    @property
    def line(self) -> str:
        return self.text % self.args if self.args else self.text


Effect = Publish | Record | DeriveKey | Log

#: Who may join: raises Illegal (not registered, wrong secret); True when the
#: secret was verified at once; None when only a (slow) derivation can tell.
Admit = Callable[[str, str], bool | None]
#: Who may take a seat in this arena now (a tournament's roster): raises
#: Illegal. Asked when a join is read and again when it is applied: the
#: roster may change while the key is derived.
Seat = Callable[[str], None]


def _printable(topic: str, limit: int = 120) -> str:
    shown = topic if topic.isprintable() else ascii(topic)[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "..."


class Arena:
    """The referee of one arena (one topic prefix)."""

    def __init__(
        self,
        game: Game,
        referee_key: PrivateKey,
        *,
        admit: Admit | None = None,
        sealed_joins_only: bool = False,
        unbound_fire: bool = False,
        max_pending: int | None = None,
    ) -> None:
        self.game = game
        self.topics = game.topics
        self._referee_key = referee_key
        self.pubkey = crypto.public_key_b64(referee_key)
        #: Who may join at all (a tournament's registered teams), see :data:`Admit`.
        self.admit = admit
        #: Who may take a seat now, see :data:`Seat` (None: whoever is admitted).
        self.seat: Seat | None = None
        #: Refuse plain-JSON joins: the secret then never crosses the network.
        self.sealed_joins_only = sealed_joins_only
        #: Accept the v1 fire data ``{x, y}`` (unsafe: replayable elsewhere).
        self.unbound_fire = unbound_fire
        #: Derivations in flight in all, and by name (at most one each).
        self.max_pending = max_pending or 2 * game.config.max_players + 8
        self._deriving: dict[str, DeriveKey] = {}
        #: name -> until when its joins are refused after a wrong secret
        self._cooldown: dict[str, float] = {}
        # Derived keys and known-wrong secrets, by a digest keyed with a
        # per-process secret, so this memory is no offline guessing aid.
        self._keys: OrderedDict[bytes, bytes] = OrderedDict()
        self._wrong: OrderedDict[bytes, None] = OrderedDict()
        self._digest_key = os.urandom(32)
        #: The lease this referee process holds the arena with (JSON, see
        #: salvo.referee.ownership), published retained with the presence.
        self.lease: str | None = None
        #: What a restarted referee's journal says the teams have not heard
        #: yet (the results of events journaled but not acknowledged by the
        #: broker before it stopped), and the journal id they reach.
        self.backlog: list[Publish] = []
        self.backlog_to = 0
        #: Its game replaced another game on the broker (salvo.referee.ownership.claim:
        #: --fresh, a take-over): what the broker queued for the arena was
        #: sent to that game, so the referee starts on a clean MQTT session.
        self.replaced = False

    # -- entry points -----------------------------------------------------------

    def presence(self) -> list[Publish]:
        """Everything retained this arena owns: after (re)connecting, publish it all."""
        t = self.topics
        # "up" last: whoever waits for it finds the rest in place.
        out = [Publish(topic, payload, True) for topic, payload in self.game.retained.items()]
        if self.lease is not None:
            out.append(Publish(t.lease, self.lease, True))
        return [
            *out,
            Publish(t.pubkey, self.pubkey, True),
            Publish(t.version, PROTOCOL_VERSION, True),
            Publish(t.server, "up", True),
        ]

    def extend(self, seconds: float, now: float) -> list[Effect]:
        """Give the running deadline ``seconds`` more (the referee was cut off
        from the broker that long: nobody could play). Journaled."""
        ev = Extend(seconds, now)
        game_no = self.game.game_no
        result = self.game.handle(ev)
        if isinstance(result, Accepted) and result.effects:
            return [Record(ev, game_no), *result.effects, Log(True, result.summary)]
        return []

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
        return [Log(False, f"lobby not closed: {result.error.reason}")]

    def abandon(self, reason: str, now: float) -> list[Effect]:
        """Begin a new game over the one in progress (see engine.Abandon); an
        untouched lobby is left as it is."""
        game = self.game
        if game.phase is Phase.LOBBY and not game.players:
            return []
        ev = Abandon(reason, now)
        game_no = game.game_no
        result = game.handle(ev)
        assert isinstance(result, Accepted)  # an abandon is never refused
        return [Record(ev, game_no), *result.effects, Log(True, result.summary)]

    # -- the organiser's controls of the game (each journaled when it changed anything) --

    def pause(self, reason: str, now: float) -> list[Effect]:
        """Stop the clock (engine.Pause); nothing without a running deadline."""
        return self._control(Pause(reason, now))

    def resume(self, now: float) -> list[Effect]:
        """Start the clock again with the time it had left (engine.Resume)."""
        return self._control(Resume(now, "organiser"))

    def add_time(self, seconds: float, now: float) -> list[Effect]:
        """The organiser's extra time on the running (or paused) deadline."""
        return self._control(Extend(seconds, now))

    def abort(self, reason: str, now: float) -> list[Effect]:
        """End the game in progress without a result; its players are told
        why (``game_aborted``) and an empty lobby opens. Not an empty lobby
        (nothing to abort) nor a game over (its result stands)."""
        if self.game.phase is Phase.LOBBY and not self.game.players:
            return [Log(True, "abort: nothing to abort (an empty lobby)")]
        return self._control(Abandon(reason, now, tell=True))

    def _control(self, ev: Pause | Resume | Extend | Abandon) -> list[Effect]:
        game_no = self.game.game_no
        result = self.game.handle(ev)
        what = type(ev).__name__.lower()
        if isinstance(result, Rejected):
            return [Log(True, f"organiser's {what} refused: {result.error.reason}")]
        if not result.effects:
            return [Log(True, f"organiser's {what}: {result.summary}")]
        return [Record(ev, game_no), *result.effects, Log(True, f"organiser's {what}: {result.summary}")]

    def on_message(self, topic: str, payload: bytes, now: float) -> list[Effect]:
        route = self.topics.parse_inbound(topic)
        if route is None:
            return self._report(topic, route, Malformed("not a topic the referee reads"), self.topics.errors)
        try:
            if len(payload) > codec.MAX_PAYLOAD:
                raise Malformed(f"payload too large: {len(payload)} bytes, limit {codec.MAX_PAYLOAD}", Code.TOO_LARGE)
            if route.kind is Inbound.FIRE:
                return self._fire(topic, route, payload, now)
            if route.kind is Inbound.PLACE:
                return self._place(topic, route, payload, now)
            return self._join(topic, route, payload, now)
        except Rejection as err:
            return self._report(topic, route, err, self._error_topic(route))

    def on_key(self, job: DeriveKey, key: bytes, now: float) -> list[Effect]:
        """A derivation requested by a :class:`DeriveKey` effect finished."""
        self._deriving.pop(job.name, None)
        _remember(self._keys, job.digest, key, KEY_CACHE_SIZE)
        if job.game_no != self.game.game_no:
            # The lobby it was asked for closed meanwhile (a no-show, the
            # organiser): a join never lands in another game than its own.
            closed = Illegal(
                Code.LOBBY_CLOSED, f"the lobby {job.name!r} asked to join closed while its key was derived: join again"
            )
            return self._refuse_join(closed, job.request_ids)
        return self._apply_join(Join(job.name, key, now), job.request_ids)

    def on_key_failed(self, job: DeriveKey, error: Rejection, now: float) -> list[Effect]:
        """A derivation (with its registry check) refused the secret."""
        self._deriving.pop(job.name, None)
        if error.code is Code.WRONG_SECRET:
            _remember(self._wrong, job.digest, None, WRONG_CACHE_SIZE)
            self._cool_down(job.name, now)
        return self._refuse_join(error, job.request_ids)

    # -- joins ------------------------------------------------------------------------

    def _join(self, topic: str, route: Route, payload: bytes, now: float) -> list[Effect]:
        value, sealed = self._open_join(payload)
        rid = wire.request_id_of(value)
        try:
            if self.sealed_joins_only and not sealed:
                raise Illegal(
                    Code.SEALED_ONLY, "this referee takes sealed joins only: seal the request to /game/pubkey"
                )
            name = _join_name(value)
            request = wire.parse_join(value)
            if request.game is not None and request.game != self.game.game_id:
                # (v2.1) an old join delivered into the next lobby joins nobody
                raise Illegal(
                    Code.WRONG_GAME, f"wrong game: the join is for game {request.game!r}, this is {self.game.game_id!r}"
                )
            self.game.check_join(name)  # fail fast before paying for a derivation
            if self.seat is not None:
                self.seat(name)
            verified = self.admit(name, request.secret) if self.admit is not None else None
            digest = nacl.hash.blake2b(f"{name}\0{request.secret}".encode(), key=self._digest_key, encoder=RawEncoder)
            key = self._keys.get(digest)
            if key is not None:
                return self._apply_join(Join(name, key, now), [] if rid is None else [rid])
            if digest in self._wrong:
                raise Illegal(Code.WRONG_SECRET, f"wrong secret for {name!r}")
            return self._derive(name, request.secret, digest, verified, rid, now)
        except Rejection as err:
            return self._refuse_join(err, [] if rid is None else [rid])

    def _derive(
        self, name: str, secret: str, digest: bytes, verified: bool | None, rid: str | None, now: float
    ) -> list[Effect]:
        job = self._deriving.get(name)
        if job is not None:
            if job.digest != digest:
                raise Illegal(Code.BUSY, f"busy: another join for {name!r} is being checked; try again in a moment")
            if rid and rid not in job.request_ids and len(job.request_ids) < MAX_REQUEST_IDS:
                job.request_ids.append(rid)
            # The same job again: the adapter derives it once, and answers
            # (acknowledges) this message with the first when it is done.
            return [job, Log(True, f"join {name}: already deriving its key")]
        until = self._cooldown.get(name)
        if verified is not True and until is not None and now < until:
            raise Illegal(
                Code.BUSY,
                f"busy: a wrong secret for {name!r} was just refused; try again in {WRONG_SECRET_COOLDOWN_S:g} s",
            )
        if len(self._deriving) >= self.max_pending:
            raise Illegal(Code.BUSY, "busy: too many joins are being checked; try again in a moment")
        job = DeriveKey(
            name, secret, digest, verify=verified is None and self.admit is not None, game_no=self.game.game_no
        )
        if rid:
            job.request_ids.append(rid)
        self._deriving[name] = job
        return [job, Log(True, f"join {name}: deriving key")]

    def _cool_down(self, name: str, now: float) -> None:
        if len(self._cooldown) >= WRONG_CACHE_SIZE:  # made-up names: forget the expired
            self._cooldown = {n: t for n, t in self._cooldown.items() if t > now}
        self._cooldown[name] = now + WRONG_SECRET_COOLDOWN_S

    def _open_join(self, payload: bytes) -> tuple[object, bool]:
        """The join's JSON value, and whether it came sealed."""
        # Base64 never starts with "{" or "[": anything else must be a sealed box.
        if payload.lstrip()[:1] in (b"{", b"["):
            return codec.loads(payload, "participation request"), False
        try:
            plaintext = crypto.open_sealed_request(self._referee_key, payload)
        except Malformed as err:
            raise Malformed(f"participation request is neither JSON nor a sealed box: {err.reason}", err.code) from None
        return codec.loads(plaintext, "sealed participation request"), True

    def _apply_join(self, event: Join, request_ids: list[str]) -> list[Effect]:
        if self.seat is not None:
            try:
                self.seat(event.name)  # again: the roster may have changed since the join was read
            except Rejection as err:
                return self._refuse_join(err, request_ids)
        game_no = self.game.game_no
        result = self.game.handle(event)
        if isinstance(result, Rejected):
            if result.error.code is Code.NAME_TAKEN:  # a wrong secret for a joined name
                self._cool_down(event.name, event.now)
            return self._refuse_join(result.error, request_ids)
        if not result.effects:  # the same name and secret again: nothing to record
            return [Log(True, "join %s: %s", (event.name, result), ROUTINE)]
        return [Record(event, game_no), *result.effects, Log(True, "accept join: %s", (result,))]

    def _refuse_join(self, err: Rejection, request_ids: list[str]) -> list[Effect]:
        """Every refused join goes to /game/errors, once per request id."""
        topic = self.topics.request_participation
        rids: list[str | None] = [*request_ids] or [None]
        effects: list[Effect] = []
        for rid in rids:
            effects += self._report(topic, Route(Inbound.JOIN), err, self.topics.errors, rid)
        return effects

    # -- placements -------------------------------------------------------------------

    def _place(self, topic: str, route: Route, payload: bytes, now: float) -> list[Effect]:
        if err := name_error(route.name):
            raise Malformed(err, Code.BAD_NAME)
        raw = crypto.decode_box(payload, "placement")
        nonce = crypto.nonce_of(raw)
        if self.game.nonce_seen(route.name, nonce) == f"{route.name}/{route.ship}":
            # Taken before: the broker delivering it again (after a restart, say).
            return [Log(True, "ignore place %s: delivered again", (_printable(topic),), ROUTINE)]
        player = self.game.check_place(route.name, route.ship)
        plaintext = crypto.open_box(player.key, raw, "placement", "your team", Code.CANNOT_DECRYPT)
        placement = wire.parse_placement(codec.loads(plaintext, "placement"))
        event = Place(route.name, route.ship, placement, now, nonce)
        game_no = self.game.game_no
        result = self.game.handle(event)
        if isinstance(result, Rejected):
            raise result.error
        if not result.effects:
            # The ship is there already: nothing to journal, but the team hears
            # it approved, as for any valid placement (expendable under a flood).
            approved = Publish(self.game.topics.approved(route.name, route.ship), TRUE, True, True)
            return [approved, Log(True, "place %s: %s", (_printable(topic), result), ROUTINE)]
        return [Record(event, game_no), *result.effects, Log(True, "accept place %s: %s", (_printable(topic), result))]

    # -- fire ---------------------------------------------------------------------------

    def _fire(self, topic: str, route: Route, payload: bytes, now: float) -> list[Effect]:
        signed = wire.parse_signed(codec.loads(payload, "fire message"))
        try:
            return self._fire_signed(topic, route, signed, now)
        except Rejection as err:
            # Public, and nobody's key vouches for the message: naming its shot
            # here would let anyone publish a "refusal" of any cell (v2.1: the
            # shot is named on the sender's own topic only).
            return self._report(topic, route, err, self.topics.errors)

    def _fire_signed(self, topic: str, route: Route, signed: wire.SignedMessage, now: float) -> list[Effect]:
        game = self.game
        raw = crypto.decode_box(signed.signature, "signature")
        found = crypto.identify(raw, game.signers())
        if found is None:
            for k, (game_id, keys) in enumerate(game.earlier_signers()):
                if (earlier := crypto.identify(raw, keys)) is not None:
                    # A shot of a game before, delivered late: its sender's
                    # own business, not a public forgery alarm.
                    which = "the previous game" if k == 0 else "an earlier game"
                    err = Illegal(Code.WRONG_GAME, f"wrong game: a shot of {which} {game_id!r}")
                    return self._report(topic, route, err, self.topics.player_error(earlier[0]), signed=signed)
            raise Illegal(Code.BAD_SIGNATURE, "signature does not open with the key of any player of this game")
        sender, plaintext = found
        nonce = crypto.nonce_of(raw)
        seen = game.nonce_seen(sender, nonce)
        if seen == route.name:
            # A shot on its own topic again: the broker delivering it again.
            return [Log(True, "ignore fire %s: %s's shot delivered again", (_printable(topic), sender), ROUTINE)]
        game_no = game.game_no
        try:
            if seen is not None:  # spent: refused before, or a shot sent on at another target
                raise Illegal(Code.REPLAYED, "replayed signature: this signature was already used in this game")
            crypto.check_signed(plaintext, signed.data)
            event = self._fire_event(route, signed.data, sender, nonce, now)
            result = game.handle(event)
            if isinstance(result, Rejected):
                raise result.error
        except Rejection as err:
            effects: list[Effect] = []
            if seen is None:
                sig, shot = signed.signature[: codec.SIGNATURE_ECHO], wire.shot_of(signed.data, route.name)
                burn = Burn(sender, nonce, now, err.code, topic, err.reason, sig, shot)
                if isinstance(game.handle(burn), Accepted):
                    effects.append(Record(burn, game_no))
            return effects + self._report(topic, route, err, self.topics.player_error(sender), signed=signed)
        return [Record(event, game_no), *result.effects, Log(True, "accept fire %s: %s", (_printable(topic), result))]

    def _fire_event(self, route: Route, data: object, sender: str, nonce: bytes, now: float) -> Fire:
        if err := name_error(route.name, "target name"):
            raise Malformed(err, Code.BAD_NAME)
        try:
            bound = wire.parse_fire(data)
        except Malformed:
            if not self.unbound_fire:
                raise
            v1 = wire.parse_unbound_fire(data)
            return Fire(sender, route.name, v1.x, v1.y, v1.turn, None, nonce, now)
        if bound.target != route.name:
            raise Illegal(Code.WRONG_TARGET, f"wrong target: signed for {bound.target[:32]!r}, sent to {route.name!r}")
        return Fire(sender, route.name, bound.x, bound.y, bound.turn, bound.game, nonce, now)

    # -- the one place errors are mapped to topics --------------------------------------

    def _error_topic(self, route: Route) -> str:
        """Where a message's rejection goes when its sender is not known by key."""
        t = self.topics
        if route.kind is Inbound.PLACE and not name_error(route.name):
            # The ship level is echoed into a topic only when it is a plain name.
            if NAME_RE.fullmatch(route.ship):
                return t.ship_error(route.name, route.ship)
            return t.player_error(route.name)
        return t.errors

    def _report(
        self,
        topic: str,
        route: Route | None,
        err: Rejection,
        where: str,
        request_id: str | None = None,
        *,
        signed: wire.SignedMessage | None = None,
    ) -> list[Effect]:
        kind = route.kind.value if route else "message"
        # (v2.1) A refused fire message's report names the shot by what was
        # read of the message itself: its signature as sent, its data's x, y.
        sig, shot = (signed.signature, wire.shot_of(signed.data, route.name)) if signed and route else (None, None)
        report = codec.error_report(topic, err.reason, err.code, request_id, sig, shot)
        return [
            Publish(where, report, False, expendable=True),
            Log(False, f"reject {kind} {_printable(topic)}: {err.code}: {err.reason} -> {where}", code=err.code),
        ]


def _join_name(value: object) -> str:
    """The name a participation request claims."""
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str):
        raise Malformed('invalid participation request: "name" must be a string')
    if err := name_error(name):
        raise Malformed(err, Code.BAD_NAME)
    return name


K = TypeVar("K")
V = TypeVar("V")


def _remember(memory: OrderedDict[K, V], key: K, value: V, size: int) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > size:
        memory.popitem(last=False)
