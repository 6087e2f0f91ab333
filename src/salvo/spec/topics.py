"""Every MQTT topic name of the protocol, and the parser of inbound topics.

This is the only module that spells topic strings. Team names and arena
prefixes become topic levels, so they are validated here: 1-32 characters of
``[A-Za-z0-9_-]``; anything else (``/ + # $``, spaces, NUL, non-ASCII) could
inject levels or wildcards.

``tournament`` is reserved too: it is the tournament's namespace.
``players`` is reserved as a team name and as a prefix: the shipped ACL grants
``/+/players/%u/...`` for prefixed arenas, and a team or arena called
``players`` would make ``/players/players/<team>/...`` readable by a team
named like one of its sub-levels.

:func:`access_filters` lists the filters of the broker's ACL (spec section 9);
``salvo.organiser.teams.render_acl`` turns them into mosquitto's acl_file.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

NAME_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,32}", re.ASCII)
RESERVED_NAMES: Final = frozenset({"players", "tournament"})


def name_error(name: str, what: str = "team name") -> str | None:
    """Why ``name`` cannot be a team name (or arena prefix), or None."""
    if not NAME_RE.fullmatch(name):
        return f"invalid {what}: use 1-32 characters of A-Z a-z 0-9 _ -"
    if name in RESERVED_NAMES:
        return f"invalid {what}: {name!r} is reserved"
    return None


def is_valid_name(name: str) -> bool:
    return name_error(name) is None


def matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic filter matching (``+`` one level, ``#`` the rest)."""
    f_levels, t_levels = topic_filter.split("/"), topic.split("/")
    for i, f in enumerate(f_levels):
        if f == "#":
            return True
        if i >= len(t_levels) or (f != "+" and f != t_levels[i]):
            return False
    return len(f_levels) == len(t_levels)


class Inbound(enum.Enum):
    """The topic families the referee subscribes to."""

    JOIN = "join"
    PLACE = "place"
    FIRE = "fire"


class Outbound(enum.Enum):
    """The topic families the referee publishes (values: :class:`Topics` attributes)."""

    STATE = "state"
    SERVER = "server"
    PUBKEY = "pubkey"
    VERSION = "version"  # (v2.1)
    GAME_ID = "game_id"
    LEASE = "lease"
    SWEEP = "sweep"
    DEADLINE = "deadline"
    TURN = "turn"
    CURRENT = "current"
    HITS = "hits"
    SALVO = "salvo"
    WINNER = "winner"
    RECORD = "record"
    ERRORS = "errors"
    STATS_SUMMARY = "stats_summary"
    PLAYERS_LIST = "players_list"
    PLAYERS_COUNT = "players_count"
    STATS_PLAYER = "stats_player"  # name
    HIT = "hit"  # name
    PLAYER_ERROR = "player_error"  # name
    DEFEATED = "defeated"  # name
    APPROVED = "approved"  # name, ship
    SUNK = "sunk"  # name, ship
    SHIP_ERROR = "ship_error"  # name, ship


#: The last level of a player's own topics, and of their ships'.
_PLAYER_LEAVES: Final = {"hit": Outbound.HIT, "error": Outbound.PLAYER_ERROR, "defeated": Outbound.DEFEATED}
_SHIP_LEAVES: Final = {"approved": Outbound.APPROVED, "sunk": Outbound.SUNK, "error": Outbound.SHIP_ERROR}
#: The families of one topic per arena: all but the per-player ones.
_GAME_WIDE: Final = tuple(set(Outbound) - {*_PLAYER_LEAVES.values(), *_SHIP_LEAVES.values(), Outbound.STATS_PLAYER})


@dataclass(frozen=True, slots=True)
class Route:
    """An inbound topic taken apart. ``name`` and ``ship`` are raw topic levels:
    they are *not* validated here, so the caller can tell a bad name (report on
    ``/game/errors``) from a bad message of a good name."""

    kind: Inbound
    name: str = ""
    ship: str = ""


@dataclass(frozen=True, slots=True)
class Published:
    """A topic the referee publishes, taken apart (raw levels, as :class:`Route`'s)."""

    kind: Outbound
    name: str = ""
    ship: str = ""


class Topics:
    """Topic builders for one arena. ``Topics("a").state == "/a/game/state"``."""

    def __init__(self, prefix: str = "") -> None:
        if prefix and (err := name_error(prefix, "arena prefix")):
            raise ValueError(err)
        self.prefix = prefix
        root = f"/{prefix}" if prefix else ""
        self._root = root
        self._game = f"{root}/game"
        self._players = f"{root}/players"
        self.state = f"{self._game}/state"
        self.server = f"{self._game}/server"
        self.pubkey = f"{self._game}/pubkey"
        #: (v2.1) the protocol version the referee speaks ("2.1"), retained
        self.version = f"{self._game}/version"
        #: (v2) the current game's random id, which every fire message signs
        self.game_id = f"{self._game}/id"
        #: The referee's own: which referee process holds the arena (its
        #: lease), so that a second one refuses to start (not public).
        self.lease = f"{self._game}/lease"
        self.deadline = f"{self._game}/deadline"
        self.turn = f"{self._game}/turn"
        self.current = f"{self._game}/current"
        self.hits = f"{self._game}/hits"
        self.salvo = f"{self._game}/salvo"
        self.winner = f"{self._game}/winner"
        #: (v2) the whole game, fleets included, once it is over (spec section 7)
        self.record = f"{self._game}/record"
        self.errors = f"{self._game}/errors"
        self.stats_summary = f"{self._game}/stats/summary"
        self.request_participation = f"{self._game}/request_participation"
        self.players_list = f"{self._players}/list"
        self.players_count = f"{self._players}/count"
        #: The referee's own marker at the end of its start-up sweep (not retained).
        self.sweep = f"{self._game}/sweep"
        #: The referee's own probe through the broker (pacing.LagClock; not
        #: retained): outside /game/, which everybody reads; only the
        #: referee's login reads or writes it (the ACL gives teams nothing there).
        self.probe = f"{root}/referee/probe"
        self._players_slash = self._players + "/"
        self._stats_players = f"{self._game}/stats/players/"
        #: each game-wide topic to its (shared, immutable) route
        self._outbound = {getattr(self, kind.value): Published(kind) for kind in _GAME_WIDE}
        # Per-player builders run on every shot: memoise them per instance. The
        # bound keeps a flood of made-up names from growing memory.
        self.player_error = lru_cache(maxsize=1024)(self._player_error)
        self.hit = lru_cache(maxsize=1024)(self._hit)
        self.fire = lru_cache(maxsize=1024)(self._fire)
        self.defeated = lru_cache(maxsize=1024)(self._defeated)
        self.stats_player = lru_cache(maxsize=1024)(self._stats_player)
        self.approved = lru_cache(maxsize=1024)(self._approved)
        self.sunk = lru_cache(maxsize=1024)(self._sunk)
        self.ship_error = lru_cache(maxsize=1024)(self._ship_error)
        self.place = lru_cache(maxsize=1024)(self._place)
        self.parse_outbound = lru_cache(maxsize=1024)(self._parse_outbound)

    def _player_error(self, name: str) -> str:
        return f"{self._players}/{name}/error"

    def _hit(self, name: str) -> str:
        return f"{self._players}/{name}/hit"

    def _fire(self, name: str) -> str:
        return f"{self._players}/{name}/fire"

    def _defeated(self, name: str) -> str:
        return f"{self._players}/{name}/defeated"

    def _stats_player(self, name: str) -> str:
        return f"{self._game}/stats/players/{name}"

    def _approved(self, name: str, ship: str) -> str:
        return f"{self._players}/{name}/ships/{ship}/approved"

    def _sunk(self, name: str, ship: str) -> str:
        return f"{self._players}/{name}/ships/{ship}/sunk"

    def _ship_error(self, name: str, ship: str) -> str:
        return f"{self._players}/{name}/ships/{ship}/error"

    def _place(self, name: str, ship: str) -> str:
        return f"{self._players}/{name}/ships/{ship}/place"

    # -- subscriptions -------------------------------------------------------

    @property
    def inbound_filters(self) -> tuple[str, ...]:
        """What the referee subscribes to."""
        return (
            self.request_participation,
            f"{self._players}/+/ships/+/place",
            f"{self._players}/+/fire",
        )

    @property
    def public_filters(self) -> tuple[str, ...]:
        """Everything a spectator may read (spec section 9)."""
        return (
            f"{self._game}/state",
            f"{self._game}/server",
            f"{self._game}/pubkey",
            f"{self._game}/id",
            f"{self._game}/deadline",
            f"{self._game}/turn",
            f"{self._game}/current",
            f"{self._game}/hits",
            f"{self._game}/salvo",
            f"{self._game}/winner",
            f"{self._game}/errors",
            f"{self._game}/stats/#",
            self.players_list,
            self.players_count,
            f"{self._players}/+/ships/+/sunk",
            f"{self._players}/+/defeated",
            f"{self._game}/record",  # (v2) then (v2.1) version: the order of the shipped ACL
            f"{self._game}/version",
        )

    @property
    def retained_filters(self) -> tuple[str, ...]:
        """Every topic family the referee may hold retained, and nothing it
        reads (overlapping filters would deliver inbound messages twice)."""
        g = self._game
        return (
            *(
                f"{g}/{t}"
                for t in (
                    "state",
                    "server",
                    "pubkey",
                    "id",
                    "deadline",
                    "turn",
                    "current",
                    "salvo",
                    "winner",
                    "record",
                    "version",
                )
            ),
            f"{g}/stats/#",
            self.players_list,
            self.players_count,
            f"{self._players}/+/ships/+/approved",
            f"{self._players}/+/ships/+/sunk",
            f"{self._players}/+/defeated",
        )

    @property
    def team_filter(self) -> str:
        """One filter for all a team reads of this arena, for brokers that
        keep the referee's order within one subscription only (NATS makes
        each a JetStream consumer of its own, and a winner could arrive
        after the state that says the game is over). It also brings inbound
        topics where the broker lets the team read them (mosquitto's ACL
        does not: it filters a wildcard subscription message by message)."""
        return f"/{self.prefix}/#" if self.prefix else "/#"

    def private_filter(self, name: str) -> str:
        """Everything addressed to one team."""
        return f"{self._players}/{name}/#"

    def tool_marker(self, tool: str) -> str:
        """A test tool's own marker topic in this arena (``/<prefix>/chaos/marker``):
        outside its game and players levels, so no referee or team reads it."""
        return f"{self._root}/{tool}/marker"

    @property
    def namespace_filters(self) -> tuple[str, ...]:
        """Everything under this arena's ``game`` and ``players`` levels (an
        observer of a prefixed arena reads these of the unprefixed one to see
        what a referee publishes outside its own)."""
        return (f"{self._game}/#", f"{self._players}/#")

    def everything(self) -> str:
        """A filter for every topic of this arena (prefixed arenas only are
        fully separable; unprefixed ``#`` also matches other arenas)."""
        return f"/{self.prefix}/#" if self.prefix else "#"

    # -- parsing -------------------------------------------------------------

    def parse_inbound(self, topic: str) -> Route | None:
        """Take an inbound topic apart; None when it is not one of ours."""
        if topic == self.request_participation:
            return Route(Inbound.JOIN)
        if not topic.startswith(self._players_slash):
            return None
        levels = topic[len(self._players_slash) :].split("/")
        if len(levels) == 2 and levels[1] == "fire":
            return Route(Inbound.FIRE, name=levels[0])
        if len(levels) == 4 and levels[1] == "ships" and levels[3] == "place":
            return Route(Inbound.PLACE, name=levels[0], ship=levels[2])
        return None

    def _parse_outbound(self, topic: str) -> Published | None:
        """Take a topic the referee publishes apart; None when it is not one
        of this arena's. (Memoised per instance: a client reads the same
        topics all game long.)"""
        if (route := self._outbound.get(topic)) is not None:
            return route
        if topic.startswith(self._stats_players):
            name = topic[len(self._stats_players) :]
            return Published(Outbound.STATS_PLAYER, name=name) if name and "/" not in name else None
        if not topic.startswith(self._players_slash):
            return None
        levels = topic[len(self._players_slash) :].split("/")
        if not levels[0]:
            return None
        if len(levels) == 2 and (kind := _PLAYER_LEAVES.get(levels[1])) is not None:
            return Published(kind, name=levels[0])
        if len(levels) == 4 and levels[1] == "ships" and levels[2] and (kind := _SHIP_LEAVES.get(levels[3])):
            return Published(kind, name=levels[0], ship=levels[2])
        return None

    def player_of(self, topic: str) -> str | None:
        """The ``<name>`` level of any topic under this arena's players (raw,
        not validated); None for any other topic."""
        return topic[len(self._players_slash) :].partition("/")[0] if topic.startswith(self._players_slash) else None

    def owns(self, topic: str) -> bool:
        """True when ``topic`` lies in this arena's namespace."""
        return topic.startswith((self._game + "/", self._players + "/"))


def any_arena(topic_filter: str) -> str:
    """``topic_filter`` (of the unprefixed arena) for every prefixed arena at
    once: ``/+/game/turn`` from ``/game/turn``."""
    return "/+" + topic_filter


#: One Topics per prefix met (bounded: a topic names its own prefix).
_ARENAS: Final = lru_cache(maxsize=1024)(Topics)


def arena_of(topic: str) -> tuple[str, Published | None]:
    """Any arena's topic taken apart: its prefix ("" unprefixed) and what
    the referee publishes there (None: none of its topics, or a level that
    is no valid prefix)."""
    levels = topic.split("/", 2)
    prefix = levels[1] if len(levels) == 3 and not levels[0] and levels[1] not in ("game", "players") else ""
    if prefix and not is_valid_name(prefix):
        return prefix, None
    return prefix, _ARENAS(prefix).parse_outbound(topic)


def arena_topics(prefix: str) -> Topics | None:
    """The (shared) topics of arena ``prefix``; None when it is no valid prefix."""
    return _ARENAS(prefix) if not prefix or is_valid_name(prefix) else None


class TournamentTopics:
    """The tournament's own topics (outside every arena; readable by all)."""

    root: Final = "/tournament"
    standings: Final = "/tournament/standings"
    schedule: Final = "/tournament/schedule"
    #: The director's own marker: once it comes back, every retained
    #: message of its subscription has arrived (not retained).
    marker: Final = "/tournament/marker"

    @staticmethod
    def assignment(team: str) -> str:
        """Where team ``team`` is told which arena to play in next."""
        if err := name_error(team):
            raise ValueError(err)
        return f"/tournament/assignments/{team}"

    @staticmethod
    def assignments() -> str:
        """A filter for every team's assignment."""
        return "/tournament/assignments/+"

    @classmethod
    def public_filters(cls) -> tuple[str, ...]:
        """What everybody may read of the tournament (nothing else under
        /tournament is its: another level there is nobody's to trust)."""
        return (cls.standings, cls.schedule, cls.assignments())


@dataclass(frozen=True, slots=True)
class AccessFilters:
    """The topic filters of the broker's ACL (spec section 9) for unprefixed
    topics or for every arena prefix at once (``/+/...``). Team-own filters
    name the team as ``%u`` (mosquitto's username placeholder)."""

    #: everyone reads: every /game/... topic but the join topic, the player
    #: list and count, sunk ships, defeats
    public: tuple[str, ...]
    #: every team writes: the join topic and any player's fire topic
    team_write: tuple[str, ...]
    #: a team writes only its own: its placements
    own_write: tuple[str, ...]
    #: a team reads only its own: hit, error, ship approved and ship error.
    #: Never its fire topic: nobody but the referee reads a signed shot.
    own_read: tuple[str, ...]


def access_filters(any_prefix: bool = False, prefix: str = "") -> AccessFilters:
    """The ACL's filters: unprefixed, under one arena ``prefix``, or
    (``any_prefix``) under ``/+/``, every prefix at once."""
    t = Topics()
    root = any_arena("") if any_prefix else f"/{prefix}" if prefix else ""
    public = dict.fromkeys(t.public_filters)
    return AccessFilters(
        public=tuple(root + f for f in public),
        team_write=(root + t.request_participation, root + t.fire("+")),
        own_write=(root + t.place("%u", "+"),),
        own_read=tuple(
            root + f for f in (t.hit("%u"), t.player_error("%u"), t.approved("%u", "+"), t.ship_error("%u", "+"))
        ),
    )
