"""`salvo bot` as a service: the house bot is a container's PID 1, a team's
bot runs all evening on the venue network. It stops cleanly on SIGTERM and
SIGINT, keeps one MQTT connection for the whole evening and retries the
broker with back-off (down, restarted, refusing its login) instead of
exiting, and takes its play from --mode / SALVO_MODE."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from salvo.arena.resume import make_arenas
from salvo.cli import main
from salvo.game.events import Config
from salvo.net.mqtt import Backoff, Broker
from salvo.referee.service import Referee
from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord
from salvo.spec import crypto
from salvo.spec.topics import TournamentTopics

from conftest import BrokerFactory, RefereeFactory
from mosquitto import Mosquitto, write_passwords
from mqttkit import Recorder, wait_until

#: What `salvo bot` must take at most from SIGTERM to its exit.
STOP_BUDGET_S = 2.0


class Bot:
    """``salvo bot`` in a process of its own (its own session, as under a
    service manager: no terminal signal reaches it), its output (stdout and
    stderr) read line by line as it comes."""

    def __init__(self, *args: str, ignore_sigterm: bool = False, **env: str) -> None:
        cmd = [sys.executable, "-m", "salvo", "bot", *args]
        if ignore_sigterm:
            # A container's PID 1 gets no default action for SIGTERM: the
            # signal is dropped unless the program installs a handler. An
            # ignored disposition survives exec, so this is the same test.
            cmd = ["sh", "-c", 'trap "" TERM; exec "$@"', "sh", *cmd]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SALVO_")}
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**clean, "COLUMNS": "120", **env},
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:  # the end of its output: nobody waits for more
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pred: Callable[[list[str]], Any], timeout: float = 30.0, what: str = "output") -> Any:
        """What ``pred`` makes of the output lines once it is something,
        waiting for that (not past the end of the output)."""
        with self._cond:
            self._cond.wait_for(lambda: pred(self.lines) or not self._reader.is_alive(), timeout)
            found = pred(self.lines)
        assert found, f"no {what} (exit {self.proc.poll()}, waited {timeout:g} s):\n{self.output}"
        return found

    def wait_line(self, pred: Callable[[str], bool], timeout: float = 30.0, what: str = "line") -> str:
        """The first output line ``pred`` accepts, waiting for it."""
        line: str = self.wait_for(lambda lines: next((x for x in lines if pred(x)), None), timeout, what)
        return line

    def finish(self, timeout: float) -> int:
        """Its exit code, once its output is read to the end."""
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(5)


@pytest.fixture
def bots() -> Iterator[Callable[..., Bot]]:
    started: list[Bot] = []

    def start(*args: str, **kw: Any) -> Bot:
        bot = Bot(*args, **kw)
        started.append(bot)
        return bot

    yield start
    for bot in started:
        bot.kill()


def client_ids(log: str, team: str) -> list[str]:
    """The MQTT client ids ``team``'s connections had, one per connection, in ``log``."""
    return re.findall(rf"New client connected from \S+ as (salvo-{team}-[0-9a-f]+) ", log)


def start_own_referee(mosq: Mosquitto, prefixes: list[str], workdir: Path) -> Referee:
    key = crypto.load_or_create_referee_key(workdir / "referee.key")
    arenas = make_arenas(prefixes, Config(turn_timeout=10), 1, key)
    ref = Referee(arenas, Broker.from_url(mosq.url("referee")), client_id=f"ref-{uuid.uuid4().hex[:8]}")
    ref.start()
    assert ref.wait_connected(10), "referee did not connect"
    return ref


# -- the back-off -------------------------------------------------------------------------------


def test_the_back_off_doubles_from_1_s_to_30_s_jittered_and_starts_over() -> None:
    backoff = Backoff()
    firsts = set()
    for _ in range(200):  # (the jitter is random: many draws)
        waits = [backoff.next() for _ in range(8)]
        for wait, full in zip(waits, [1, 2, 4, 8, 16, 30, 30, 30], strict=True):
            assert full / 2 <= wait <= full
        firsts.add(waits[0])
        backoff.reset()  # a connection the broker accepted
    assert len(firsts) > 100  # jittered: bots that lost the same broker do not come back in step


# -- 1. SIGTERM and SIGINT --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "like_pid_1"),
    [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGINT, False)],
    ids=["SIGTERM-as-PID-1", "SIGTERM", "SIGINT"],
)
def test_a_signal_stops_the_bot_cleanly_within_2_s(
    broker: Mosquitto,
    start_referee: RefereeFactory,
    prefix: str,
    watcher: Recorder,
    bots: Callable[..., Bot],
    sig: signal.Signals,
    like_pid_1: bool,
) -> None:
    start_referee()
    before = len(broker.log())
    bot = bots(
        "--name", "alice", "--secret", "alice-s", "--prefix", prefix, ignore_sigterm=like_pid_1,
        SALVO_BROKER=broker.url("alice"),
    )  # fmt: skip
    # Waiting in the lobby for an opponent: the state a house bot spends its evening in.
    watcher.wait(lambda m: m.topic == f"/{prefix}/players/list" and b"alice" in m.payload, timeout=30)
    sent = time.monotonic()
    os.kill(bot.proc.pid, sig)
    try:
        code = bot.finish(STOP_BUDGET_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {STOP_BUDGET_S:g} s after {sig.name}:\n{bot.output}") from None
    assert code == 0, bot.output
    assert time.monotonic() - sent < STOP_BUDGET_S
    assert f"received {sig.name}: leaving the broker" in bot.output and "stopped" in bot.lines
    # It left the broker with a DISCONNECT, not by dropping the socket.
    (client_id,) = client_ids(broker.log()[before:], "alice")
    wait_until(lambda: f"Client {client_id} disconnected" in broker.log()[before:], what="its leaving")
    assert f"Client {client_id} disconnected." in broker.log()[before:], (bot.output, broker.log()[before:])
    assert f"Client {client_id} closed its connection" not in broker.log()[before:]


def test_a_signal_stops_the_bot_while_it_waits_for_the_broker(bots: Callable[..., Bot]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        port = closed.getsockname()[1]
        bot = bots("--name", "alice", "--secret", "s", SALVO_BROKER=f"mqtt://alice:pw@127.0.0.1:{port}")
        bot.wait_line(lambda x: "retrying in" in x, what="a retry")
        bot.proc.send_signal(signal.SIGTERM)
        assert bot.finish(STOP_BUDGET_S) == 0, bot.output
    assert "stopped" in bot.lines


# -- 2. one connection, retried with back-off ----------------------------------------------------


def test_a_bot_started_before_the_broker_plays_once_it_comes_up(
    new_broker: BrokerFactory, tmp_path: Path, bots: Callable[..., Bot]
) -> None:
    mosq = new_broker()  # not up yet
    alice = bots(
        "--name", "alice", "--secret", "alice-s", "--prefix", "early", "--games", "1",
        SALVO_BROKER=mosq.url("alice"),
    )  # fmt: skip
    # Two retries, one log line each, the second wait no shorter than the first
    # (1 s, 2 s, 4 s ... up to 30 s, each jittered down to as little as half).
    alice.wait_for(lambda lines: len(_waits(lines)) >= 2, what="two retries")
    first, second = _waits(alice.lines)[:2]
    assert 0.5 <= first <= 1.0 <= second <= 2.0, alice.output
    assert f"cannot reach the broker at 127.0.0.1:{mosq.port}" in alice.output
    mosq.start()
    ref = start_own_referee(mosq, ["early"], tmp_path)
    bob = SalvoClient("bob", "bob-s", mosq.url("bob"), prefix="early").connect()
    try:
        records: list[list[GameRecord]] = []
        opponent = threading.Thread(target=lambda: records.append(bob.play(_strategy("bob"))), daemon=True)
        opponent.start()
        alice.wait_line(lambda x: x.startswith("game 1: winner "), what="game 1's summary")
        assert alice.finish(30) == 0, alice.output
        opponent.join(30)
        assert records and records[0][0].winner in ("alice", "bob")
    finally:
        bob.close()
        ref.stop()
    retries = [x for x in alice.lines if "retrying in" in x]
    assert retries and all("cannot reach the broker" in x for x in retries)


def test_a_refused_login_is_retried_until_the_organiser_fixes_it(
    new_broker: BrokerFactory, bots: Callable[..., Bot]
) -> None:
    mosq = new_broker()
    mosq.start()
    alice = bots(
        "--name", "alice", "--secret", "alice-s", "--prefix", "refused",
        SALVO_BROKER=f"mqtt://alice:typo-pw@127.0.0.1:{mosq.port}",
    )  # fmt: skip
    refused = alice.wait_line(lambda x: "retrying in" in x, what="a retry")
    assert "ERROR" in refused and "refused the login 'alice'" in refused, refused
    # The organiser gives alice the password her card says, and makes mosquitto read it.
    write_passwords(mosq.passwd, {**mosq.users, "alice": "typo-pw"})
    mosq.reload()
    alice.wait_line(lambda x: "alice: connected to the broker" in x, what="the connection", timeout=40)
    assert alice.proc.poll() is None
    alice.proc.send_signal(signal.SIGTERM)
    assert alice.finish(STOP_BUDGET_S) == 0, alice.output


def test_a_tournament_bot_plays_its_next_game_on_one_connection_across_a_broker_restart(
    new_broker: BrokerFactory, tmp_path: Path, bots: Callable[..., Bot]
) -> None:
    """alice is chosen by SALVO_MODE=tournament, bob by --tournament (which
    wins over --mode). Game 1 in arena a1, the broker restarts, game 2 in
    arena a2: both on the process's one MQTT connection."""
    mosq = new_broker()
    mosq.start()
    ref = start_own_referee(mosq, ["a1", "a2"], tmp_path)
    try:
        alice = bots("--name", "alice", "--secret", "alice-s", SALVO_MODE="tournament", SALVO_BROKER=mosq.url("alice"))
        bob = bots(
            "--name", "bob", "--secret", "bob-s", "--mode", "free-play", "--tournament", "--seed", "2",
            SALVO_BROKER=mosq.url("bob"),
        )  # fmt: skip
        _assign(mosq, {"id": "g1", "round": 1, "arena": "a1", "opponents": ["alice", "bob"]})
        for team in (alice, bob):
            team.wait_line(lambda x: x.startswith("game 1: winner "), what="game 1's summary")

        mosq.restart()  # every connection drops; the retained assignments survive
        alice.wait_line(lambda x: "lost the connection to the broker" in x and "retrying in" in x, what="a retry")
        _assign(mosq, {"id": "g2", "round": 2, "arena": "a2", "opponents": ["alice", "bob"]})
        for team in (alice, bob):
            team.wait_line(lambda x: x.startswith("game 2: winner "), what="game 2's summary")
        _assign(mosq, {"done": True})
        for team in (alice, bob):
            assert team.finish(30) == 0, team.output
            assert any(line.startswith("tournament done: 2 games played") for line in team.lines)
    finally:
        ref.stop()
    # One client id each, connected twice: before the restart and after it.
    for name in ("alice", "bob"):
        ids = client_ids(mosq.log(), name)
        assert len(ids) == 2 and len(set(ids)) == 1, ids


def _waits(lines: list[str]) -> list[float]:
    """The waits of the retries the bot logged, in seconds."""
    return [float(m[1]) for x in lines if (m := re.search(r"retrying in ([0-9.]+) s", x))]


def _assign(mosq: Mosquitto, job: dict[str, Any]) -> None:
    """The director's word to alice and bob (retained, as it publishes it)."""
    director = Recorder(mosq, "referee", [])
    try:
        for team in ("alice", "bob"):
            # 0x10: taken, nobody reads it yet (a team not yet connected)
            assert director.publish(TournamentTopics.assignment(team), json.dumps(job), retain=True) in (0, 0x10)
    finally:
        director.close()


def _strategy(seed: str) -> Any:
    from salvo.sdk.bots import make_strategy

    return make_strategy("random", seed)


# -- 3. --mode, SALVO_MODE, SALVO_BOT_ARENA; 4. games numbered from 1 -----------------------------


@pytest.mark.parametrize(
    ("args", "env", "plays"),
    [
        ([], {}, "free-play in ''"),
        ([], {"SALVO_BOT_ARENA": "arena7"}, "free-play in 'arena7'"),
        (["--prefix", "arena2"], {"SALVO_BOT_ARENA": "arena7"}, "free-play in 'arena2'"),
        (["--mode", "free-play", "--prefix", "arena2"], {"SALVO_MODE": "tournament"}, "free-play in 'arena2'"),
        ([], {"SALVO_MODE": "tournament", "SALVO_BOT_ARENA": "arena7"}, "tournament"),
        (["--mode", "tournament"], {}, "tournament"),
        (["--tournament", "--mode", "free-play"], {}, "tournament"),
        (["--tournament"], {"SALVO_MODE": "free-play"}, "tournament"),
    ],
    ids=[
        "default",
        "SALVO_BOT_ARENA",
        "--prefix-over-SALVO_BOT_ARENA",
        "--mode-over-SALVO_MODE",
        "SALVO_MODE",
        "--mode",
        "--tournament-over---mode",
        "--tournament-over-SALVO_MODE",
    ],
)
def test_the_mode_option_chooses_free_play_or_the_tournament(
    args: list[str], env: dict[str, str], plays: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("SALVO_")]:
        monkeypatch.delenv(name)
    chosen: list[str] = []
    record = GameRecord(0, "alice", "alice", None, None)  # an arena's first game is its game 0

    def free_play(client: SalvoClient, _strategy: Any, _games: int | None, on_game: Any) -> int:
        chosen.append(f"free-play in {client.topics.prefix!r}")
        on_game(record)
        return 1

    def tournament(*_a: Any, client: SalvoClient, on_game: Any, **_kw: Any) -> int:
        chosen.append("tournament")
        on_game(record)
        on_game(record)
        return 2

    monkeypatch.setattr("salvo.sdk.bots.service.play_on", free_play)
    monkeypatch.setattr("salvo.sdk.follow.follow", tournament)
    monkeypatch.setattr(SalvoClient, "start", lambda self: self)  # no broker here
    before = signal.getsignal(signal.SIGTERM)
    result = CliRunner().invoke(main, ["bot", "--name", "alice", "--secret", "s", *args], env=env)
    assert result.exit_code == 0, result.output
    assert chosen == [plays]
    # The bot numbers its own games (the fakes played one, or two, each an arena's game 0).
    games = [line.split(":")[0] for line in result.output.splitlines() if line.startswith("game ")]
    assert games == (["game 1", "game 2"] if plays == "tournament" else ["game 1"])
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handlers go with it


def test_an_unknown_mode_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SALVO_MODE", "league")
    result = CliRunner().invoke(main, ["bot", "--name", "alice", "--secret", "s"])
    assert result.exit_code == 2 and "'league' is not one of 'free-play', 'tournament'" in result.output


def test_a_house_bot_waits_for_the_next_tournament_instead_of_exiting(
    broker: Mosquitto, bots: Callable[..., Bot], prefix: str, start_referee: RefereeFactory
) -> None:
    """A container's bot that exits when the tournament is done is started
    again and again by Docker (the walkthrough saw 7 restarts in 10 s). With
    --after-tournament wait it stays, and plays the next night's games."""
    start_referee()
    watch = Recorder(broker, "referee", [f"/{prefix}/players/list"])
    topic = "/tournament/assignments/dave"
    try:
        watch.publish(topic, json.dumps({"done": True}), retain=True)
        args = ["--name", "dave", "--secret", "dave-secret-for-tests", "--mode", "tournament"]
        bot = bots(*args, "--broker", broker.url("dave"), "--log-level", "info", SALVO_BOT_AFTER_TOURNAMENT="wait")
        bot.wait_line(lambda line: "the tournament is done; waiting for the next one" in line, what="waiting")
        assert bot.proc.poll() is None  # still there
        mark = watch.mark()
        watch.publish(topic, json.dumps({"id": "n2-1", "round": 1, "arena": prefix, "opponents": ["x"]}), retain=True)
        watch.wait(lambda m: b"dave" in m.payload, after=mark, timeout=30)  # joined the next night's game
    finally:
        watch.publish(topic, "", retain=True)
        watch.close()
