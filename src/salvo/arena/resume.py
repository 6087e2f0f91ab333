"""An arena's game from the journal: a known arena resumes where its
events left it, with what the broker never acknowledged to publish again; a
new one starts with a seed and an id key of its own."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from nacl.public import PrivateKey

from salvo.arena.arena import Arena, Record
from salvo.arena.journal import Store
from salvo.game.engine import Game
from salvo.game.events import Burn, Config, Fire, Rejected
from salvo.game.identity import KEYED_DRAW
from salvo.spec import codec
from salvo.spec.payloads import Publish, message
from salvo.spec.topics import Topics

log = logging.getLogger("salvo.referee")


class Heartbeat:
    """When a referee was last alive with its state file: the modification
    time of ``<state>-alive``, touched every second while it runs. Read at
    start-up, it says how long the referee was away, so that a session the
    broker kept longer than the resume window (MQTT 3.1.1 has no expiry) is
    not resumed. No file (a new state file, a restored backup, a referee of
    an older version): away for an unknown time, which counts as too long."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def beside(state: Path) -> Heartbeat:
        return Heartbeat(Path(f"{state}-alive"))

    def away(self, now: float) -> float | None:
        """Seconds since the last beat; None when there never was one."""
        try:
            return max(0.0, now - self.path.stat().st_mtime)
        except OSError:
            return None

    def stale(self, now: float, window: float) -> bool:
        """Was the referee away longer than ``window`` (or for how long, unknown)?"""
        away = self.away(now)
        if away is None:  # a first start: nothing was queued for it
            log.info("no heartbeat of an earlier run: the referee starts on a clean MQTT session")
            return True
        if away > window:
            log.warning(
                "the referee was last alive %.0f s ago, beyond its resume window of %g s: it starts on a clean MQTT"
                " session; what the broker queued for it meanwhile is dropped",
                away,
                window,
            )
            return True
        return False

    def beat(self) -> None:
        """Alive now. A failure (a full disk) is the journal's to report."""
        with contextlib.suppress(OSError):
            self.path.touch(mode=0o600)
            os.utime(self.path)


def write_health(path: Path, text: str) -> None:
    """Replace ``path`` with one line (a reader never sees half of it). A
    failure (a full disk) is the journal's to report; a stale file then says
    the service is unwell."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(OSError):
        tmp.write_text(text + "\n")
        os.replace(tmp, path)


def make_arenas(
    prefixes: list[str],
    config: Config,
    seed: int | str | None,
    referee_key: PrivateKey,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
    *,
    sealed_joins_only: bool = False,
    unbound_fire: bool = False,
) -> list[Arena]:
    """One arena per prefix, all sharing the referee key pair. Each has a
    random key its game ids derive from, and, without a ``seed``, its first
    players too (identity.KEYED_DRAW: nothing a team can be handed, an export
    included, predicts them). A given seed draws arena ``p``'s first players
    from ``(seed, p)`` (tests, simulations).

    With a store, a known arena resumes: its stored seed and id key, then
    every event of its current game replayed through the engine."""
    arenas = []
    for p in prefixes:
        known = store.arena(p) if store is not None else None
        if known is None:
            arena_seed = KEYED_DRAW if seed is None else _arena_seed(seed, p)
            id_key = os.urandom(32)
            if store is not None:
                store.add_arena(p, arena_seed, config, id_key)
            game = Game(config, Topics(p), arena_seed, id_key=id_key)
            arenas.append(Arena(game, referee_key, sealed_joins_only=sealed_joins_only, unbound_fire=unbound_fire))
            continue
        assert store is not None
        game, backlog, backlog_to = _resume(store, p, known)
        arena = Arena(game, referee_key, sealed_joins_only=sealed_joins_only, unbound_fire=unbound_fire)
        arena.backlog, arena.backlog_to = backlog, backlog_to
        if seed is not None and _arena_seed(seed, p) != known[0]:
            log.warning("[%s] keeps its stored seed; --seed applies to new arenas only", p or "(default)")
        if arena.game.config != config:
            # Journaled, so a later replay switches settings at this very point.
            for effect in arena.configure(config, clock()):
                if isinstance(effect, Record):
                    store.record(p, effect.game_no, effect.event)
        arenas.append(arena)
    return arenas


def _arena_seed(seed: int | str, prefix: str) -> str:
    return f"{seed}/{prefix}" if prefix else str(seed)


def _resume(store: Store, prefix: str, known: tuple[str, Config, bytes]) -> tuple[Game, list[Publish], int]:
    """The arena's game as its journal left it; and what its events entitled
    the teams to hear that the broker never acknowledged (the referee died
    between journaling and publishing): those publishes in order, and the
    journal id they reach."""
    seed, created_with, id_key = known
    game_no, events = store.current_game_ids(prefix)
    config = store.config_before(prefix, game_no) or created_with
    published = store.published(prefix)
    # Only this game's nonces matter (its id binds every signature to it):
    # they come back with its events.
    game = Game(config, Topics(prefix), seed, game_no=game_no, id_key=id_key)
    backlog: list[Publish] = []
    for event_id, journaled in events:
        event = journaled
        if type(event) is Fire and not event.shooter:
            # A v1 journal: its shots were the current player's.
            event = event._replace(shooter=game.current or "")
        result = game.handle(event)
        if isinstance(result, Rejected):  # the journal and the engine disagree: say so, go on
            log.error("[%s] journal event %s no longer applies: %s", prefix, event, result.error.reason)
        elif event_id > published:
            backlog += result.effects
            if type(event) is Burn and event.topic:
                # The refusal's report went with the burn's batch: a message
                # delivered again now is `replayed`, so its sender hears the
                # real reason only from here.
                report = codec.error_report(
                    event.topic, event.reason, event.code, None, event.signature or None, event.shot
                )
                backlog.append(message(game.topics.player_error(event.player), report))
    backlog = _latest_retained(backlog, game.topics.hits)
    log.info(
        "[%s] resumed game %d from %s: %d events replayed, state %s, turn %d; %d results to publish again",
        prefix or "(default)",
        game.game_no,
        store.path,
        len(events),
        game.phase.value,
        game.turn,
        len(backlog),
    )
    return game, backlog, events[-1][0] if events and events[-1][0] > published else 0


def _latest_retained(backlog: list[Publish], hits: str) -> list[Publish]:
    """The backlog with only the last value of each retained topic: publishing
    the values in between again would send a retained topic back in time
    (a lobby list shrinking) before it reaches its value again. And only the
    last ``/game/hits``, which goes with the ``/game/salvo`` kept: the
    count carries no turn, so earlier ones would come out of place."""
    last = {p.topic: i for i, p in enumerate(backlog) if p.retain}
    last_hits = max((i for i, p in enumerate(backlog) if p.topic == hits), default=-1)
    return [p for i, p in enumerate(backlog) if (last[p.topic] == i if p.retain else p.topic != hits or i == last_hits)]
