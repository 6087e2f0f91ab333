"""Starting a referee service, and why it stopped: what ``salvo referee`` and
``salvo tournament`` do around :class:`salvo.referee.service.Referee`.

Before the first message: load (or create) the referee key, open the state
file (a damaged one is refused, or set aside with ``fresh``: never deleted),
make the arenas from it, and claim them on the broker (see
:mod:`salvo.referee.ownership`). Afterwards: why the service stopped on its own.
Every refusal is a :mod:`salvo.failures` class saying what the organiser can
do; nothing is touched, on the broker or in the state file, before it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from salvo.arena.journal import Store
from salvo.arena.statefile import StoreDamaged, set_aside
from salvo.failures import BrokerRefusal, Failure, LocalFailure
from salvo.spec import crypto

if TYPE_CHECKING:
    from nacl.public import PrivateKey

    from salvo.arena.arena import Arena
    from salvo.game.events import Config
    from salvo.net.mqtt import Broker
    from salvo.referee.admission import Registry
    from salvo.referee.batch import Fatal
    from salvo.referee.service import Referee

log = logging.getLogger("salvo.referee.bootstrap")


def load_key(key_file: Path) -> PrivateKey:
    """The referee's key, created (0600) on first use."""
    try:
        return crypto.load_or_create_referee_key(key_file)
    except Exception as exc:  # unreadable, corrupt, wrong permissions: the user must act
        raise LocalFailure(f"cannot use key file {key_file}: {exc}") from None


def client_id(given: str | None, base: str, key: PrivateKey) -> str:
    """The referee's MQTT client id base: as given, or ``base`` with a part
    derived from the referee key (unguessable, stable across restarts)."""
    return given or f"{base}-{crypto.client_id_tag(key)}"


def load_registry(path: Path) -> Registry:
    """The team registry a referee admits teams from; it must exist."""
    from salvo.referee.admission import Registry, TeamsError

    if not path.exists():
        raise LocalFailure(f"no team registry at {path} (create it with: salvo teams add NAME --registry {path})")
    try:
        registry = Registry(path)
        log.info("admitting only the %d teams of %s", len(registry.teams), path)
    except (OSError, TeamsError) as exc:
        raise LocalFailure(str(exc)) from None
    return registry


# -- the state file and the arenas ---------------------------------------------------------


def open_state(state: Path, broker: Broker, prefixes: list[str], *, fresh: bool) -> Store:
    """The state file; a damaged one (emptied, not SQLite, unreadable) is
    refused, or set aside for a new one with ``fresh`` (never deleted)."""
    try:
        return Store(state)
    except StoreDamaged as exc:
        if not fresh:
            raise LocalFailure(
                f"refusing to start: {exc}.{games_shown(broker, prefixes)} Restore it from a backup"
                " (docs/reliability.md), or start with --fresh to set it aside and begin a new game"
            ) from None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        moved = set_aside(state, stamp)
        log.warning("--fresh: %s; set aside as %s", exc, ", ".join(map(str, moved)))
        return Store(state)


def games_shown(broker: Broker, prefixes: list[str]) -> str:
    """The games in progress the broker shows for these arenas, as a sentence
    (for a refusal: the organiser learns what the damaged file held)."""
    from salvo.referee.ownership import survey

    try:
        seen = survey(broker, prefixes, timeout=5.0)
    except (OSError, TimeoutError):
        return ""
    shown = [f"arena {p or '(default)'}: game {s.game_id} ({s.state})" for p, s in seen.items() if s.in_progress]
    return f" The broker shows games in progress it held: {'; '.join(shown)}." if shown else ""


def referee_arenas(
    state: Path,
    broker: Broker,
    prefixes: list[str],
    config: Config,
    seed: int | None,
    key: PrivateKey,
    *,
    fresh: bool,
    sealed_joins_only: bool = False,
    unbound_fire: bool = False,
) -> tuple[Store, list[Arena]]:
    """``salvo referee``'s state file (see :func:`open_state`) and its arenas,
    resumed from it."""
    store, arenas = _arenas(
        state,
        lambda: open_state(state, broker, prefixes, fresh=fresh),
        prefixes,
        config,
        seed,
        key,
        sealed_joins_only=sealed_joins_only,
        unbound_fire=unbound_fire,
    )
    if unbound_fire:
        log.warning("--allow-unbound-fire: v1 fire messages are accepted; their signatures can be replayed elsewhere")
    return store, arenas


def tournament_arenas(
    state: Path, prefixes: list[str], config: Config, key: PrivateKey, *, sealed_joins_only: bool = False
) -> tuple[Store, list[Arena]]:
    """A tournament's referee journal (no setting aside: a damaged one is
    refused) and its arenas, resumed from it."""
    return _arenas(state, lambda: Store(state), prefixes, config, None, key, sealed_joins_only=sealed_joins_only)


def _arenas(
    state: Path,
    opener: Callable[[], Store],
    prefixes: list[str],
    config: Config,
    seed: int | None,
    key: PrivateKey,
    *,
    sealed_joins_only: bool = False,
    unbound_fire: bool = False,
) -> tuple[Store, list[Arena]]:
    from salvo.arena.resume import make_arenas

    store = None
    try:
        store = opener()
        arenas = make_arenas(
            prefixes, config, seed, key, store, sealed_joins_only=sealed_joins_only, unbound_fire=unbound_fire
        )
    except (OSError, sqlite3.Error) as exc:
        if store is not None:
            store.close()
        raise LocalFailure(f"cannot use state file {state}: {exc}") from None
    return store, arenas


def claim(broker: Broker, arenas: list[Arena], store: Store, *, fresh: bool, role: str = "") -> None:
    """Take the arenas as a referee of ``role`` (salvo.referee.ownership.FREE_PLAY or
    TOURNAMENT), or stop before touching anything (see
    :func:`salvo.referee.ownership.claim`); the store is closed on a refusal."""
    from salvo.referee.ownership import claim as claim_arenas

    try:
        problems = claim_arenas(broker, arenas, store, fresh=fresh, role=role)
    except TimeoutError as exc:
        store.close()
        raise Failure(str(exc)) from None
    except PermissionError as exc:
        store.close()
        raise BrokerRefusal(str(exc)) from None
    except OSError as exc:  # the state file cannot keep the lease
        store.close()
        raise LocalFailure(str(exc)) from None
    if problems:
        store.close()
        raise LocalFailure("refusing to start:\n  " + "\n  ".join(problems))


# -- running, and why it stopped -------------------------------------------------------------


def run_until(service: Referee, stop: threading.Event, poll: float = 0.2) -> None:
    """Run ``service`` until ``stop`` is set or an arena stops on its own;
    then raise the failure it stopped for, if any."""
    service.start()
    while not stop.wait(poll):
        if service.any_stopped():
            break
    service.stop()
    if (failure := failure_of(service.fatal)) is not None:
        raise failure


def failure_of(fatal: Fatal | None) -> Failure | None:
    """The failure class for why a service stopped on its own (see
    :class:`salvo.referee.batch.Stop`); None for a requested stop."""
    if fatal is None:
        return None
    from salvo.referee.batch import Stop

    kind: dict[Stop, type[Failure]] = {
        Stop.BROKER_REFUSED: BrokerRefusal,
        Stop.STATE: LocalFailure,
        Stop.ARENA_TAKEN: LocalFailure,
    }
    return kind.get(fatal.kind, Failure)(fatal.reason)
