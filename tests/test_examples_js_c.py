"""The JavaScript and C examples are real programs: built as a team builds
them (``npm ci``; ``make``), each plays whole games against the real
referee (``salvo referee`` with a registry made by ``salvo teams add``, on the
session's mosquitto with the shipped conf and ACL): against the Python SDK's
bot, against each other over TLS with a CA made by ``salvo tls``, and a
refused join ends with its code. Without node/npm or the C libraries these
tests skip; CI (.ci/run, SALVO_REQUIRE_EXAMPLES=1) installs them and fails
instead."""

from __future__ import annotations

import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from nacl.public import PrivateKey

from conftest import BrokerFactory
from mosquitto import Mosquitto
from mqttkit import Recorder

EXAMPLES: Final = Path(__file__).resolve().parent.parent / "examples"
SALVO: Final = [sys.executable, "-m", "salvo"]
#: The teams of the registry, their game secrets (``teams add`` wants 16+ characters).
TEAMS: Final = ("jsbot", "jsbot2", "cbot", "cbot2", "pybot")


def _secret(name: str) -> str:
    return f"{name}-game-secret-for-tests"


def _unavailable(why: str) -> None:
    if os.environ.get("SALVO_REQUIRE_EXAMPLES"):
        pytest.fail(f"SALVO_REQUIRE_EXAMPLES is set but {why}")
    pytest.skip(why)


def _env() -> dict[str, str]:
    """The programs' environment without the suite's SALVO_* settings (the bots read SALVO_*)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SALVO_")}


def _run(cmd: list[str], *, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, env=_env(), **kw)


def _spawn(cmd: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())


@pytest.fixture(scope="session")
def js_bot(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """examples/js installed with ``npm ci`` from its lock file, in a copy outside the checkout."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable("node and npm are not installed (apt-get install nodejs npm)")
    assert node and npm
    work = tmp_path_factory.mktemp("js-example") / "js"
    shutil.copytree(EXAMPLES / "js", work, ignore=shutil.ignore_patterns("node_modules"))
    done = _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=work, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [node, str(work / "bot.js")]


@pytest.fixture(scope="session")
def c_bot(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """examples/c built with its Makefile into a directory outside the checkout."""
    if not (shutil.which("make") and shutil.which("cc") and shutil.which("pkg-config")):
        _unavailable("make, cc or pkg-config is not installed")
    libs = _run(["pkg-config", "--exists", "libsodium", "libcjson"])
    paho = _run(["cc", "-E", "-"], input="#include <MQTTClient.h>\n")
    if libs.returncode or paho.returncode:
        _unavailable("the C libraries are missing (apt-get install libpaho-mqtt-dev libsodium-dev libcjson-dev)")
    build = tmp_path_factory.mktemp("c-example")
    done = _run(["make", "-C", str(EXAMPLES / "c"), f"BUILD={build}"], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [str(build / "salvo-bot")]


@pytest.fixture(scope="session")
def registry(broker: Mosquitto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The organiser's registry and the teams' broker logins, made by ``salvo teams add``."""
    path = tmp_path_factory.mktemp("registry") / "teams.json"
    for name in TEAMS:
        password = f"{name}-mqtt-pw"
        files = ["--registry", str(path), "--passwd", str(broker.passwd)]
        added = _run([*SALVO, "teams", "add", name, *files, "--secret", _secret(name), "--mqtt-password", password])
        assert added.returncode == 0, added.stdout + added.stderr
        broker.users[name] = password
    broker.reload()  # mosquitto re-reads the password file and the ACL
    return path


def _team(
    broker: Mosquitto, prefix: str, program: list[str], name: str, *, tls: bool = False, secret: str | None = None
) -> Bot:
    """An example program playing as team ``name`` (a login of the registry)."""
    port = broker.tls_port if tls else broker.port
    args = ["--name", name, "--secret", secret or _secret(name), "--password", broker.users[name]]
    args += ["--host", "127.0.0.1", "--port", str(port), "--prefix", prefix]
    if tls:
        args += ["--ca-file", str(broker.ca_file)]
    return Bot(name, _spawn([*program, *args]))


@dataclass
class Arena:
    """A ``salvo referee`` of this test's own on a fresh prefix of ``broker``."""

    broker: Mosquitto
    prefix: str
    proc: subprocess.Popen[str]
    watch: Recorder

    def team(self, program: list[str], name: str, *, tls: bool = False, secret: str | None = None) -> Bot:
        return _team(self.broker, self.prefix, program, name, tls=tls, secret=secret)

    def python_bot(self, name: str) -> Bot:
        url = self.broker.url(name)
        args = ["bot", "--name", name, "--secret", _secret(name), "--broker", url, "--prefix", self.prefix]
        return Bot(name, _spawn([*SALVO, *args, "--games", "1", "--strategy", "random"]))

    def winner(self) -> str:
        """The referee's own word: the retained /game/winner once the game is over."""
        self.watch.wait_for(f"/{self.prefix}/game/state", "over", timeout=60)
        return self.watch.text(f"/{self.prefix}/game/winner") or ""


@dataclass
class Bot:
    name: str
    proc: subprocess.Popen[str]

    def finish(self, timeout: float = 90) -> str:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        finally:
            self.proc.kill()
        print(f"--- {self.name}:\n{out}")  # shown on failure, or with -s
        assert self.proc.returncode == 0, f"{self.name} exited {self.proc.returncode}:\n{out}"
        return out


def _played(out: str, name: str, winner: str) -> None:
    """An example's last two lines: its figures (it fired, nothing was refused) and the winner."""
    lines = out.strip().splitlines()
    assert lines[-1] == f"winner: {winner}", out
    assert lines[-2].startswith("me: ") and lines[-2].endswith("; 0 refusals"), out
    assert not lines[-2].startswith("me: 0 shots"), out
    assert not any(line.startswith(("refused:", "sent away:")) for line in lines), out


@contextmanager
def running_arena(broker: Mosquitto, registry: Path, tmp_path: Path) -> Iterator[Arena]:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    watch = Recorder(broker, "referee", [f"/{prefix}/game/#"])
    cmd = [*SALVO, "referee", "--broker", broker.url("referee"), "--prefix", prefix, "--teams", str(registry)]
    cmd += ["--sealed-joins-only", "--key-file", str(tmp_path / "referee.key"), "--state", str(tmp_path / "ref.db")]
    cmd += ["--turn-timeout", "10", "--placement-timeout", "30", "--seed", "1"]
    proc = _spawn(cmd)
    try:
        watch.wait_for(f"/{prefix}/game/state", "lobby", timeout=30)
        yield Arena(broker, prefix, proc, watch)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        watch.close()


@pytest.fixture
def arena(broker: Mosquitto, registry: Path, tmp_path: Path) -> Iterator[Arena]:
    with running_arena(broker, registry, tmp_path) as running:
        yield running


@pytest.mark.parametrize("language", ["js", "c"])
def test_example_plays_a_whole_game_against_the_python_bot(
    language: str, arena: Arena, request: pytest.FixtureRequest
) -> None:
    program: list[str] = request.getfixturevalue(f"{language}_bot")
    name = f"{language}bot"
    example, python = arena.team(program, name), arena.python_bot("pybot")
    winner = arena.winner()
    assert winner in (name, "pybot")
    _played(example.finish(), name, winner)
    assert f"winner {winner}" in python.finish()


def test_js_and_c_examples_play_each_other_over_tls_with_the_organisers_ca(
    js_bot: list[str], c_bot: list[str], registry: Path, broker: Mosquitto, new_broker: BrokerFactory, tmp_path: Path
) -> None:
    # A venue broker: the shipped conf, its certificate from `salvo tls` (a CA of its own).
    venue = new_broker("venue", users=dict(broker.users))
    made = _run([*SALVO, "tls", "--dir", str(tmp_path / "ca"), "--broker-dir", str(venue.tls.directory)])
    assert made.returncode == 0, made.stdout + made.stderr
    venue.ca_file = tmp_path / "ca" / "ca.crt"
    venue.start()
    with running_arena(venue, registry, tmp_path) as arena:
        js, c = arena.team(js_bot, "jsbot", tls=True), arena.team(c_bot, "cbot", tls=True)
        winner = arena.winner()
        assert winner in ("jsbot", "cbot")
        _played(js.finish(), "jsbot", winner)
        _played(c.finish(), "cbot", winner)


@pytest.mark.parametrize("language", ["js", "c"])
def test_example_reads_its_join_refusal_by_code(language: str, arena: Arena, request: pytest.FixtureRequest) -> None:
    program: list[str] = request.getfixturevalue(f"{language}_bot")
    bot = arena.team(program, f"{language}bot2", secret="not-the-registered-secret")
    out, _ = bot.proc.communicate(timeout=60)
    assert bot.proc.returncode == 1, out
    assert out.startswith("join refused: wrong_secret: "), out


def test_examples_are_small_and_avoid_the_latency_traps() -> None:
    """Teaching code under ~300 lines; MQTT.js with Nagle off, Paho C with reliable=0 and Nagle off
    (what each is worth: test_latency_traps_cost_a_salvo_tens_of_milliseconds)."""
    js, c = (EXAMPLES / "js" / "bot.js").read_text(), (EXAMPLES / "c" / "bot.c").read_text()
    assert len(js.splitlines()) <= 300 and len(c.splitlines()) <= 300
    assert "setNoDelay?.(true)" in js and "conn.reliable = 0;" in c and "TCP_NODELAY, &one" in c


@pytest.mark.parametrize("language", ["js", "c"])
def test_example_reads_v21_fire_refusals_and_per_game_hits(
    language: str, broker: Mosquitto, registry: Path, request: pytest.FixtureRequest
) -> None:  # registry: the teams' broker logins
    """Protocol v2.1's additions, before the referee sends them: a scripted
    referee (the referee's login) refuses one shot with its ``signature``
    prefix and ``shot``, and sends hits that differ only in ``game``. The
    example names the refused shot, signs a fresh replacement, and counts a
    hit once per ``(game, turn, shot)``."""
    program: list[str] = request.getfixturevalue(f"{language}_bot")
    name, prefix = f"{language}bot", f"t{uuid.uuid4().hex[:12]}"
    P, game = f"/{prefix}", "f4f2e80d6f85efdc"
    ref = Recorder(
        broker, "referee", [f"{P}/game/request_participation", f"{P}/players/+/ships/+/place", f"{P}/players/+/fire"]
    )
    try:
        ref.publish(f"{P}/game/pubkey", base64.b64encode(bytes(PrivateKey.generate().public_key)).decode(), retain=True)
        ref.publish(f"{P}/game/id", game, retain=True)
        ref.publish(f"{P}/game/state", "lobby", retain=True)
        bot = _team(broker, prefix, program, name)
        ref.wait_for(f"{P}/game/request_participation", timeout=30)
        ref.publish(f"{P}/players/{name}/ships/carrier/approved", "false")  # live: the join is accepted
        for ship in ("carrier", "battleship", "destroyer", "submarine", "patrolboat"):
            ref.wait_for(f"{P}/players/{name}/ships/{ship}/place")
        ref.publish(f"{P}/players/list", json.dumps([name, "bob"]), retain=True)
        ref.publish(f"{P}/game/state", "turn", retain=True)
        ref.publish(f"{P}/game/turn", json.dumps({"turn": 1, "player": name, "shots": 2}), retain=True)
        fire = f"{P}/players/bob/fire"
        ref.wait(lambda m: len(ref.on(fire)) == 2, what="two shots")
        first = json.loads(ref.on(fire)[0].payload)
        assert first["data"]["target"] == "bob" and first["data"]["turn"] == 1 and first["data"]["game"] == game
        report: dict[str, Any] = {"topic": fire, "error": "target defeated", "code": "defeated_target"}
        report |= {"signature": first["signature"][:16], "shot": {k: first["data"][k] for k in ("target", "x", "y")}}
        ref.publish(f"{P}/players/{name}/error", json.dumps(report))
        ref.wait(lambda m: len(ref.on(fire)) == 3, what="the replacement shot")
        signatures = {json.loads(m.payload)["signature"] for m in ref.on(fire)}
        assert len(signatures) == 3  # signed anew: a refused signature is spent
        for hit_game in (game, game, "0123456789abcdef"):  # a duplicate, then another game's (turn, shot)
            ref.publish(f"{P}/players/{name}/hit", json.dumps({"x": 1, "y": 2, "turn": 1, "shot": 1, "game": hit_game}))
        ref.publish(f"{P}/game/winner", name, retain=True)
        ref.publish(f"{P}/game/state", "over", retain=True)
        out, _ = bot.proc.communicate(timeout=30)
        assert bot.proc.returncode == 0, out
        x, y = first["data"]["x"], first["data"]["y"]
        assert f"refused: defeated_target (shot {x},{y} at bob): target defeated" in out, out
        assert "shot at 2 times; 1 refusals" in out, out
    finally:
        for topic in ("game/pubkey", "game/id", "game/state", "players/list", "game/turn", "game/winner"):
            ref.publish(f"{P}/{topic}", "", retain=True)
        ref.close()


def _salvo_ms(arena: Arena, player: str) -> list[float]:
    """Milliseconds from each of ``player``'s /game/turn to its /game/salvo, as the referee's login saw them."""
    announced: dict[int, float] = {}
    spans = []
    for m in arena.watch.messages:
        if m.topic == f"/{arena.prefix}/game/turn" and m.payload and m.json()["player"] == player:
            announced[m.json()["turn"]] = m.at
        elif m.topic == f"/{arena.prefix}/game/salvo" and m.payload and m.json()["turn"] in announced:
            spans.append((m.at - announced[m.json()["turn"]]) * 1000)
    return spans


@pytest.mark.long
def test_latency_traps_cost_a_salvo_tens_of_milliseconds(
    js_bot: list[str], c_bot: list[str], broker: Mosquitto, registry: Path, tmp_path: Path
) -> None:
    """The figures of the examples' READMEs: a salvo's time (its turn announced
    to its result) with each example as shipped, and with its latency fix
    undone: MQTT.js without setNoDelay, Paho C with Nagle left on, Paho C with
    reliable=1. Two games of each against the SDK's bot; printed, and the
    shipped examples must be the faster."""
    node, script = js_bot
    Path(script).with_name("nagle.js").write_text(
        Path(script).read_text().replace("setNoDelay?.(true)", "setNoDelay?.(false)")
    )
    source = (EXAMPLES / "c" / "bot.c").read_text()
    variants: dict[str, list[str]] = {
        "js as shipped": js_bot,
        "js, Nagle on": [node, str(Path(script).with_name("nagle.js"))],
    }
    variants["c as shipped"] = c_bot
    for label, old, new in [
        ("c, Nagle on", "setsockopt(fd", "(void)(fd"),
        ("c, reliable=1", "reliable = 0", "reliable = 1"),
    ]:
        work = tmp_path / f"c-variant-{len(variants)}"
        shutil.copytree(EXAMPLES / "c", work)
        assert old in source
        (work / "bot.c").write_text(source.replace(old, new))
        built = _run(["make", "-C", str(work), f"BUILD={work}"], timeout=120)
        assert built.returncode == 0, built.stdout + built.stderr
        variants[label] = [str(work / "salvo-bot")]
    medians: dict[str, float] = {}
    for label, program in variants.items():
        name = "jsbot" if label.startswith("js") else "cbot"
        spans: list[float] = []
        for game in range(2):
            run = tmp_path / f"game-{len(medians)}-{game}"
            run.mkdir()
            with running_arena(broker, registry, run) as arena:
                example, python = arena.team(program, name), arena.python_bot("pybot")
                arena.winner()
                example.finish()
                python.finish()
                spans += _salvo_ms(arena, name)
        medians[label] = statistics.median(spans)
        print(f"{label}: {len(spans)} salvos, median {medians[label]:.1f} ms, max {max(spans):.1f} ms")
    assert medians["js as shipped"] < medians["js, Nagle on"]
    assert medians["c as shipped"] < min(medians["c, Nagle on"], medians["c, reliable=1"])
