"""Stale traffic never becomes a live game: what teams sent to an arena
while its referee was away longer than its resume window is dropped (MQTT 5:
the session expired; MQTT 3.1.1: the state file's heartbeat says so, and the
referee starts a clean session); within the window it is applied. And one
arena has one holder: a free-play ``salvo referee`` and a tournament's
referee (a Referee claimed through ``bootstrap.claim`` on another state file)
refuse to share it."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from salvo.arena.arena import DeriveKey, Record
from salvo.arena.journal import Store
from salvo.arena.resume import Heartbeat
from salvo.cli.common import ExitCode
from salvo.failures import LocalFailure
from salvo.game.events import Config
from salvo.net.mqtt import Broker
from salvo.referee import bootstrap
from salvo.referee.ownership import FREE_PLAY
from salvo.referee.service import Referee
from salvo.spec import crypto
from salvo.spec.topics import Topics
from salvo.tools.stress import RefereeProcess

from kit import COLUMNS, ROWS
from mosquitto import Mosquitto
from mqttkit import Msg, Recorder, Team, connect_team

WINDOW_S = 2


def referee(broker: Mosquitto, prefix: str, workdir: Path, protocol: str, window: int) -> RefereeProcess:
    """The same referee at every start: state file, key and client id."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = broker.url("referee") + ("?protocol=3" if protocol == "3.1.1" else "")
    flags = ["--resume-window", str(window), "--placement-timeout", "60", "--log-level", "info"]
    return RefereeProcess(Broker.from_url(url), [prefix], *flags, workdir=workdir, client_id=f"stale-{prefix}")


def send_backlog(broker: Mosquitto, prefix: str) -> list[Team]:
    """alice and bob join, place and fire at QoS 1 while no referee runs."""
    teams = [connect_team(broker, prefix, name, secret=f"{name}-old-secret") for name in ("alice", "bob")]
    for team, fleet in zip(teams, (ROWS, COLUMNS), strict=True):
        team.join()
        team.place_fleet(fleet)
    for team, target in zip(teams, ("bob", "alice"), strict=True):
        team.fire(target, 0, 0, 1, "0123456789abcdef")
    return teams  # (each publish waited for the broker's PUBACK)


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_what_was_sent_while_the_referee_was_away_longer_than_its_window_starts_no_game(
    broker: Mosquitto, prefix: str, tmp_path: Path, protocol: str
) -> None:
    ref = referee(broker, prefix, tmp_path, protocol, WINDOW_S)
    t = Topics(prefix)
    watch = Recorder(broker, "referee", [f"/{prefix}/#"])
    stale: list[Team] = []
    try:
        with ref:
            pass  # up once (its session subscribed), then stopped: 'down'
        watch.wait_for(t.server, "down")
        stale = send_backlog(broker, prefix)
        time.sleep(WINDOW_S + 1.0)  # the referee stays away longer than its window
        mark = watch.mark()
        with ref:
            # The same names join live with other secrets: were the queued
            # joins applied (or still being checked), these would be refused
            # (name_taken, busy); queued messages come before live ones.
            live = [connect_team(broker, prefix, name, secret=f"{name}-new-secret") for name in ("alice", "bob")]
            try:
                for team in live:
                    team.join()
                    watch.wait_for(t.approved(team.name, "carrier"), "false", after=mark)
            finally:
                for team in live:
                    team.conn.close()
            watch.sync(t.errors)  # (everything the referee published so far is here)
            assert watch.text(t.state) == "lobby"
            assert json.loads(watch.text(t.players_list) or "[]") == ["alice", "bob"]
            assert not [m for m in watch.since(mark) if m.topic.endswith("/approved") and m.text == "true"]
            refusals = [m for m in watch.since(mark) if m.topic == t.errors and m.payload.startswith(b"{")]
            assert not refusals  # nor a refusal of a stale join
        log = ref.log.read_text()
        assert "clean MQTT session" in log and "accept join" in log, log
    finally:
        for team in stale:
            team.conn.close()
        watch.close()


def test_within_the_window_what_was_sent_meanwhile_is_applied_on_mqtt_3(
    broker: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    """The converse on MQTT 3.1.1, where only the heartbeat tells (MQTT 5 and
    a game in progress: test_resilience.py::test_sigkill_and_restart_ends_the_same_game)."""
    ref = referee(broker, prefix, tmp_path, "3.1.1", 120)
    t = Topics(prefix)
    watch = Recorder(broker, "referee", [f"/{prefix}/#"])
    stale: list[Team] = []
    try:
        with ref:
            pass
        watch.wait_for(t.server, "down")
        stale = send_backlog(broker, prefix)
        with ref:
            # the queued joins were applied (their placements overtook them: not_joined)
            # Both joins are checked at once (argon2id, off the loop): either may be accepted first.
            def both(m: Msg) -> bool:
                return m.topic == t.players_list and sorted(json.loads(m.text or "[]")) == ["alice", "bob"]

            watch.wait(both, timeout=30, what="both joins")
    finally:
        for team in stale:
            team.conn.close()
        watch.close()


def test_the_heartbeat_says_how_long_the_referee_was_away(tmp_path: Path) -> None:
    beat = Heartbeat.beside(tmp_path / "state.db")
    assert beat.away(time.time()) is None and beat.stale(time.time(), 120)  # never beat: unknown, too long
    beat.beat()
    assert not beat.stale(time.time(), 120)
    assert beat.stale(time.time() + 121, 120)


# -- one holder per arena ----------------------------------------------------------------


def tournament_referee(broker: Mosquitto, prefix: str, workdir: Path) -> tuple[Referee, Store]:
    """What ``salvo tournament run`` does for its arenas: its own state file
    (``--referee-state``), claimed through bootstrap.claim."""
    url = Broker.from_url(broker.url("referee"))
    key = crypto.load_or_create_referee_key(workdir / "tournament.key")
    store, arenas = bootstrap.tournament_arenas(workdir / "tournament.db", [prefix], Config(), key)
    bootstrap.claim(url, arenas, store, fresh=False)  # LocalFailure when another referee holds one
    return Referee(arenas, url, client_id=f"tour-{uuid.uuid4().hex[:8]}", journal=store), store


def test_a_free_play_referee_and_a_tournament_never_both_hold_an_arena(
    broker: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    free = referee(broker, prefix, tmp_path / "free", "5", 120)
    with free, pytest.raises(LocalFailure, match=f"arena {prefix}: another referee holds it and is up"):
        tournament_referee(broker, prefix, tmp_path)
    # The other way round: the tournament holds it, `salvo referee` is refused (exit 4).
    ref, store = tournament_referee(broker, prefix, tmp_path)
    try:
        ref.start()
        assert ref.wait_connected(10)
        late = referee(broker, prefix, tmp_path / "late", "5", 120)
        late.start()
        assert late.proc is not None and late.proc.wait(60) == ExitCode.LOCAL_FILE
        refusal = late.log.read_text()
        assert f"arena {prefix}: another referee holds it" in refusal, refusal
    finally:
        ref.stop()
        store.close()


def test_a_journal_game_the_arena_moved_on_from_is_not_resumed(broker: Mosquitto, prefix: str, tmp_path: Path) -> None:
    """Free play stopped mid-game for the tournament, which ended that game
    and played its own in the arena; back to free play, the referee resumed
    its journal's game of hours before (the compose night's test saw it).
    The broker shows another referee's game since (an empty lobby here):
    the journal's game is abandoned and a new one begins."""
    url = Broker.from_url(broker.url("referee"))
    key = crypto.load_or_create_referee_key(tmp_path / "k")
    store, (arena,) = bootstrap.referee_arenas(tmp_path / "free.db", url, [prefix], Config(), None, key, fresh=False)
    for name in ("ann", "bob"):  # free play's game under way in the journal
        for event in arena.on_message(
            arena.topics.request_participation, json.dumps({"name": name, "secret": "s"}).encode(), 1.0
        ):
            if isinstance(event, DeriveKey):
                for effect in arena.on_key(event, crypto.derive_team_key(name, "s"), 1.0):
                    if isinstance(effect, Record):
                        store.record(prefix, effect.game_no, effect.event)
    old_game = arena.game.game_id
    assert len(arena.game.players) == 2
    other = Recorder(broker, "referee", [])
    try:  # the tournament's referee played here since, and stopped: its lobby on the broker
        for topic, payload in (("state", "lobby"), ("id", "f0e1d2c3b4a59687"), ("server", "down")):
            other.publish(f"/{prefix}/game/{topic}", payload, retain=True)
        bootstrap.claim(url, [arena], store, fresh=False, role=FREE_PLAY)
    finally:
        other.close()
        store.close()
    assert arena.game.game_id != old_game and arena.game.players == {}  # a new game, not the stale one
    # and what the broker queued for the arena was for the game it replaced: a clean session
    assert arena.replaced and arena.backlog == []
