"""A free-play evening and a tournament night with docker compose, on a real
Docker engine, following docs/tournament-night.md literally.

Every command block the guide marks (<!-- night: NAME -->) is taken from
the document and run as written in a copy of this checkout, the venue
address in it made this machine's; the ports and timings are settings of
.env the guide describes. Teams play from this machine over TLS, each with
its card and ca.crt only. Docker is asked what it sees (health, exit codes,
restarts); a spectator on the broker's plain port follows the games.

`pytest -m docker` (CI: .ci/run, after .ci/docker-engine). Without an
engine the test is skipped, unless SALVO_REQUIRE_DOCKER=1 says it must run.
SALVO_DOCKER_ENGINE_RESTART=1 (CI) also restarts the engine itself mid-game,
as a reboot would; SALVO_DOC_SCREENSHOTS=1 writes the projector's screenshots
to docs/screenshots/.
"""

from __future__ import annotations

import csv
import io
import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from salvo.net.watch import Recorder
from test_replay_viewer import DOCS_SHOTS, full_hd

from chromium import chromium
from nightkit import GUIDE_VENUE, Night, copy_checkout, engine_answers, guide_blocks, playing, standings, venue_address

#: The order the night takes the guide's blocks in; every marked block is here.
NIGHT = (
    "build",
    "settings",
    "tls",
    "logins",
    "house-bot",
    "up",
    "tournament",
    "status",
    "restart",
    "recover",
    "late-team",
    "export",
    "free-play-again",
    "fresh",
)


def test_the_night_runs_every_block_the_guide_marks() -> None:
    """The guide and the night below cannot drift: each marked block is run,
    and each one run is in the guide (no engine needed to check this)."""
    blocks = guide_blocks()
    assert set(blocks) == set(NIGHT)
    assert all(GUIDE_VENUE in blocks[name] for name in ("settings",))
    assert "docker compose up -d" in blocks["up"] and "SALVO_MODE=tournament" in blocks["tournament"]


@pytest.fixture
def night(tmp_path: Path) -> Iterator[Night]:
    if not engine_answers():
        if os.environ.get("SALVO_REQUIRE_DOCKER"):
            pytest.fail("a Docker engine with compose is required here: bash .ci/docker-engine")
        pytest.skip("no Docker engine (bash .ci/docker-engine sets one up)")
    checkout = tmp_path / "salvo"
    checkout.mkdir()
    copy_checkout(checkout)
    n = Night(checkout, venue_address(), log=print)
    try:
        yield n
    finally:
        for service in ("referee", "bots"):
            print(f"--- {service} log (tail)\n" + "\n".join(n.logs(service).splitlines()[-40:]))
        for team in n.teams:
            print(f"--- team {team} (tail)\n" + "\n".join(n.team_log(team).splitlines()[-10:]))
        n.down()


@pytest.mark.docker
@pytest.mark.browser  # the champion on the projector, in Chromium (no browser fixture: its own size and profile)
def test_a_night_on_the_engine_as_the_guide_says(night: Night) -> None:
    n = night
    # -- before the night: the image, .env, certificates and cards, through the image only
    n.block("build", timeout=900)
    n.block("settings")
    n.free_ports()
    # Quick games with a visible middle: a pace of 0.4 s between salvos.
    n.set_env(
        SALVO_PLACEMENT_TIMEOUT=20, SALVO_TURN_TIMEOUT=10, SALVO_RESET_AFTER=3, SALVO_PACE=0.4, SALVO_NO_SHOW_AFTER=120
    )
    (n.dir / "data").mkdir()  # as `mkdir` makes it: root's; the image gives it to 1883
    n.block("tls")
    n.block("logins")
    n.block("house-bot")
    _owned_by_1883_and_secrets_private(n.dir / "data")
    # one `teams add` line per team, as the guide says: a third team
    assert "data/tls/ca.crt" in n.sh("docker compose run --rm -T salvo teams add carol > cards/carol.txt")

    # -- free play: a team over TLS from this machine against the house bot
    n.block("up", timeout=300)
    for service in ("mosquitto", "referee", "spectate"):
        n.wait_health(service, "healthy")
    rec = n.watch()
    n.play("ada", "free play")
    free = _wait_playing(rec, min_turn=3)
    print(f"free play at {free}")

    # -- the switch to the tournament in the middle of that game
    n.block("tournament")
    rec.wait(lambda m: m.topic == "/tournament/standings" and bool(m.payload), timeout=90, what="standings")
    arena, game, _ = free
    # the free-play game is ended and cleared: a new game in its arena
    rec.wait(lambda m: m.topic == f"/{arena}/game/id" and bool(m.payload) and m.text != game, timeout=60)
    for team in ("ada", "bletchley", "carol"):
        n.play(team, "try it")
    assert "Exited" not in n.compose("ps", "-a", "referee")

    # -- the room's view of a game under way (the guide's screenshot)
    at = _wait_playing(rec, min_turn=4)
    _page_shows(
        n,
        "projector-live.png",
        f"document.querySelector('article[data-arena={at[0]}] [data-testid=turn]')?.innerText",
        f"{at[0]}'s game under way",
    )

    # -- a restart of the director mid-game: the same game goes on at its turn
    at = _wait_playing(rec, min_turn=4)
    n.block("restart")
    _goes_on(rec, at)
    status = n.block("status")
    print(status)

    # -- the director killed outright, then the guide's recovery
    at = _wait_playing(rec, min_turn=3)
    n.sh(f"docker kill {n.container('referee')}")
    assert n.inspect("referee")["State"]["Status"] == "exited"  # Docker does not bring a killed one back
    n.block("recover")
    _goes_on(rec, at)

    # -- the broker restarted mid-game (the guide: docker compose restart mosquitto)
    at = _wait_playing(rec, min_turn=3)
    n.compose("restart", "mosquitto")
    rec.close()
    rec = n.watch()
    _goes_on(rec, at)

    # -- the engine itself restarted, as a reboot would: everything comes back by itself
    if os.environ.get("SALVO_DOCKER_ENGINE_RESTART"):
        at = _wait_playing(rec, min_turn=3)
        _restart_the_engine(n)
        rec.close()
        rec = n.watch()
        _goes_on(rec, at, timeout=180)

    # -- a late team, admitted
    n.block("late-team")
    n.play("eve", "try it")

    # -- a frozen director turns the healthcheck unhealthy, and healthy again
    n.wait_health("referee", "healthy", timeout=90)
    n.signal_salvo("referee", "STOP")  # the director's process frozen (a laptop lid, a VM pause)
    try:
        n.wait_health("referee", "unhealthy", timeout=60)
    finally:
        n.signal_salvo("referee", "CONT")
    n.wait_health("referee", "healthy", timeout=60)

    # -- down and up mid-tournament: standings and the director's state survive
    before = standings(rec)
    assert before is not None
    n.compose("down", timeout=120)
    assert not n.compose("ps", "-a", "-q").split()  # down stops everything, the house bot too
    n.block("up", timeout=300)
    rec.close()
    rec = n.watch()
    after = rec.wait(lambda m: m.topic == "/tournament/standings" and bool(m.payload), timeout=60).json()
    assert after["games_played"] >= before["games_played"]  # nothing recorded was lost

    # -- to the champion: on the projector page, in Chromium at projector size
    rec.wait(
        lambda m: m.topic == "/tournament/standings" and bool(m.payload) and m.json().get("done") is True,
        timeout=600,
        what="the tournament done",
    )
    final = standings(rec)
    assert final is not None and {r["team"] for r in final["table"]} == {"ada", "bletchley", "carol", "house", "eve"}
    champion = final["table"][0]["team"]
    _page_shows(
        n,
        "projector-champion.png",
        f"document.querySelector('[data-testid=champion-team]')?.innerText === {champion!r}",
        f"{champion} the champion",
    )
    _console_answers(n)
    assert n.health("referee") == "healthy"  # after the night it serves on, still healthy

    # -- the exports after the night
    n.block("export")
    games = list(csv.DictReader(io.StringIO((n.dir / "games.csv").read_text())))
    assert len(games) >= 10 and all(g["status"] == "played" for g in games)  # five teams, every pair once
    assert "arena" in (n.dir / "games.csv").read_text().splitlines()[0]
    assert (n.dir / "tournament.json").stat().st_size > 0

    # -- free play again: the champion leaves the projector
    n.block("free-play-again")
    rec.wait(lambda m: m.topic == "/tournament/standings" and not m.payload, timeout=90, what="standings cleared")
    _page_shows(
        n,
        "projector-free-play.png",
        "document.getElementById('champion').hidden && document.querySelector('article[data-arena=arena1]')",
        "the arenas again, no champion",
    )

    # -- another night, left in the middle of a game: a refusal, not a restart loop
    n.set_env(SALVO_TOURNAMENT_STATE="night2.json", SALVO_TOURNAMENT_REFEREE_STATE="night2-referee.db")
    n.sh("sed -i 's/^SALVO_MODE=.*/SALVO_MODE=tournament/' .env && docker compose up -d")
    for team in ("ada", "bletchley"):
        n.play(team, "try it")
    _wait_playing(rec, min_turn=2, timeout=180)
    n.sh("sed -i 's/^SALVO_MODE=.*/SALVO_MODE=free-play/' .env && docker compose up -d")
    n.wait("the refused referee stopped", lambda: n.inspect("referee")["State"]["Status"] == "exited", timeout=90)
    state = n.inspect("referee")
    assert state["State"]["ExitCode"] == 0 and state["RestartCount"] == 0
    last = n.logs("referee").strip().splitlines()[-1]
    assert "a game in progress by a tournament referee" in last and "SALVO_FRESH=1" in last, last
    n.block("fresh")
    n.wait_health("referee", "healthy", timeout=90)
    assert "SALVO_FRESH=1" not in (n.dir / ".env").read_text()  # set for that one start only

    # -- every service stops within 2 s of SIGTERM
    for service in ("bots", "spectate", "referee", "mosquitto"):
        started = time.monotonic()
        n.compose("stop", service)
        took = time.monotonic() - started
        code = n.inspect(service)["State"]["ExitCode"]
        assert took < 3 and code != 137, f"{service}: {took:.1f} s, exit {code}"
    rec.close()


# -- helpers ------------------------------------------------------------------------------


def _wait_playing(rec: Recorder, min_turn: int, timeout: float = 120) -> tuple[str, str, int]:
    found: list[tuple[str, str, int]] = []

    def check() -> bool:
        at = playing(rec, min_turn)
        if at is not None:
            found.append(at)
        return at is not None

    assert rec.wait_until(check, timeout), f"no game reached turn {min_turn}"
    return found[-1]


def _goes_on(rec: Recorder, at: tuple[str, str, int], timeout: float = 120) -> None:
    """The game in ``at``'s arena goes on: the same game id, a later turn
    (or it ended meanwhile with a winner), never a new game in its place."""
    arena, game, turn = at

    def on() -> bool:
        gid, state, now = (rec.latest(f"/{arena}/game/{t}") for t in ("id", "state", "turn"))
        if gid is None or gid.text != game:
            winner = rec.latest(f"/{arena}/game/winner")
            return winner is not None and bool(winner.payload)  # over and reset already
        if state is not None and state.payload == b"over":
            return True
        return now is not None and bool(now.payload) and int(now.json()["turn"]) > turn

    assert rec.wait_until(on, timeout), f"{arena} game {game} did not go on past turn {turn}"
    gid = rec.latest(f"/{arena}/game/id")
    assert gid is not None and (gid.text == game or rec.latest(f"/{arena}/game/winner") is not None)


def _owned_by_1883_and_secrets_private(data: Path) -> None:
    for path in [data, *data.rglob("*")]:
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (1883, 1883), f"{path} belongs to {st.st_uid}:{st.st_gid}"
    secrets = ("broker/passwd", "broker/referee.passwd", "broker/mosquitto.acl", "broker/server.key", "tls/ca.key")
    for secret in (*secrets, "teams.json"):
        assert (data / secret).stat().st_mode & 0o077 == 0, f"{secret} is readable by others"
    # what the broker mounts: nothing else of data/
    broker_files = sorted(p.name for p in (data / "broker").iterdir())
    assert broker_files == ["mosquitto.acl", "passwd", "referee.passwd", "server.crt", "server.key"]


def _restart_the_engine(n: Night) -> None:
    pid = n.sh("pidof dockerd").split()[0]
    n.sh(f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.5; done")
    n.sh(f"bash {n.dir / '.ci' / 'docker-engine'}", timeout=300)
    n.wait("the referee back by itself", lambda: n.inspect("referee")["State"]["Status"] == "running", timeout=120)
    assert n.inspect("mosquitto")["State"]["Status"] == "running"


def _page_shows(n: Night, shot: str, ready: str, what: str) -> None:
    """The projector page on this laptop's port, in Chromium at 1920x1080,
    comes to show ``what``: the JavaScript expression ``ready`` turns true.
    Its screenshot is kept (docs/screenshots/ with SALVO_DOC_SCREENSHOTS=1)."""
    driver: Any = chromium(n.dir.parent / "chromium", 1920, 1080)
    try:
        full_hd(driver)
        driver.get(f"http://127.0.0.1:{n.ports['SALVO_PROJECTOR_PORT']}/")
        end = time.monotonic() + 60
        while not driver.execute_script(f"return Boolean({ready})"):
            if time.monotonic() > end:
                DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(DOCS_SHOTS / f"failed-{shot}"))
                raise AssertionError(
                    f"the projector never showed {what}:\n{driver.execute_script('return document.body.innerText')}"
                )
            time.sleep(0.25)
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(DOCS_SHOTS / shot))
    finally:
        driver.quit()


def _console_answers(n: Night) -> None:
    """The console over HTTPS with the certificate of `salvo tls`, verified
    with the ca.crt handed to teams."""
    ca = ssl.create_default_context(cafile=str(n.dir / "data" / "tls" / "ca.crt"))
    url = f"https://127.0.0.1:{n.ports['SALVO_CONSOLE_PORT']}/projector"
    with urllib.request.urlopen(url, timeout=10, context=ca) as page:
        assert page.status == 200


def test_the_engine_setup_script_is_the_projects_own() -> None:
    """CI sets the engine up with the repository's own script, never ../shared/."""
    run = (Path(__file__).parents[1] / ".ci" / "run").read_text()
    assert "bash .ci/docker-engine" in run and "shared/" not in run
    script = Path(__file__).parents[1] / ".ci" / "docker-engine"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
