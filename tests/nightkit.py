"""The compose night of docs/tournament-night.md, driven from a test: the
guide's marked command blocks, a copy of the checkout to run them in, teams
on this machine playing from their cards, and what Docker says of each
service. Used by tests/test_compose_night.py (pytest -m docker)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from salvo.net.mqtt import Broker
from salvo.net.watch import Msg, Recorder
from salvo.tools.localbroker import free_port

from mosquitto import ROOT

GUIDE = ROOT / "docs" / "tournament-night.md"
#: The venue address the guide's commands name, replaced by this machine's.
GUIDE_VENUE = "192.168.1.20"
_BLOCK = re.compile(r"<!-- night: ([\w-]+) -->\n```sh\n(.*?)```", re.DOTALL)
#: What the observer follows on the broker's plain port (anonymous, public topics).
WATCHED = ["/+/game/state", "/+/game/id", "/+/game/turn", "/+/game/server", "/+/game/winner", "/tournament/standings"]


def guide_blocks() -> dict[str, str]:
    """Every ```sh block the guide marks with <!-- night: NAME -->, by name."""
    text = GUIDE.read_text()
    blocks = dict(_BLOCK.findall(text))
    assert len(blocks) == text.count("<!-- night: "), "a marked block is not followed by ```sh, or a name repeats"
    return blocks


def venue_address() -> str:
    """This machine's address on its network (what a team at the venue
    dials), or loopback when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"
    return address


def engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    ok = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20, check=False)
    return ok and compose.returncode == 0


def copy_checkout(dest: Path) -> None:
    """The repository's files as they are in this working tree (what a fresh
    clone would hold, with uncommitted edits), without data/, .env or cards/."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@dataclass
class Night:
    """One compose project in a copy of the checkout."""

    dir: Path
    venue: str
    log: Callable[[str], None]
    project: str = field(default_factory=lambda: f"salvo-night-{os.getpid()}")
    ports: dict[str, int] = field(default_factory=dict)
    teams: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        # The salvo on PATH is this checkout's, for the teams' card lines.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "COMPOSE_PROJECT_NAME": self.project, "PATH": path}

    # -- running what the guide says --------------------------------------------------

    def block(self, name: str, timeout: float = 300) -> str:
        """Run the guide's block NAME as written (the venue address made this
        machine's), in the checkout's copy; its output."""
        script = guide_blocks()[name].replace(GUIDE_VENUE, self.venue)
        self.log(f"guide block {name!r}:\n{script.rstrip()}")
        return self.sh(script, timeout=timeout)

    def sh(self, script: str, timeout: float = 300, check: bool = True) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"exit {done.returncode}:\n{script}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            )
        return done.stdout + done.stderr

    def compose(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        return self.sh(" ".join(["docker", "compose", *args]), timeout=timeout, check=check)

    def set_env(self, **values: object) -> None:
        """Settings of .env.example's, as an organiser edits them (appended:
        the last line of a name wins)."""
        with (self.dir / ".env").open("a") as f:
            f.writelines(f"{k}={v}\n" for k, v in values.items())

    def free_ports(self) -> None:
        self.ports = {
            name: free_port()
            for name in (
                "SALVO_TLS_PORT",
                "SALVO_REFEREE_TLS_PORT",
                "SALVO_MQTT_PORT",
                "SALVO_PROJECTOR_PORT",
                "SALVO_CONSOLE_PORT",
            )
        }
        self.set_env(**self.ports)

    # -- Docker's view --------------------------------------------------------------------

    def container(self, service: str) -> str:
        out = self.compose("ps", "-a", "-q", service).split()
        assert len(out) == 1, f"{service}: containers {out}"
        return out[0]

    def inspect(self, service: str) -> dict[str, Any]:
        raw = subprocess.run(
            ["docker", "inspect", self.container(service)], capture_output=True, text=True, check=True
        ).stdout
        return dict(json.loads(raw)[0])

    def health(self, service: str) -> str:
        state = self.inspect(service)["State"]
        return str(state.get("Health", {}).get("Status", state["Status"]))

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while not check():
            if time.monotonic() > end:
                raise AssertionError(f"never: {what}\n{self.compose('ps', '-a', check=False)}")
            time.sleep(0.5)

    def wait_health(self, service: str, status: str, timeout: float = 120) -> None:
        self.wait(f"{service} {status}", lambda: self.health(service) == status, timeout)

    def signal_salvo(self, service: str, sig: str) -> None:
        """Send ``sig`` to the service's salvo process itself: the child of
        the container's init (Docker's tini is PID 1), by its host PID."""
        init = self.inspect(service)["State"]["Pid"]
        self.sh(f"pkill -{sig} -P {init}")

    def logs(self, service: str) -> str:
        return self.compose("logs", "--no-log-prefix", service, check=False)

    # -- the teams, on this machine, each with its card and ca.crt only --------------------

    def play(self, team: str, line: str) -> None:
        """Run the card's ``try it`` or ``free play`` line, as the team would."""
        self.stop_team(team)
        card = (self.dir / "cards" / f"{team}.txt").read_text()
        command = re.search(rf"^{line}: +(.+)$", card, re.MULTILINE)
        assert command, f"no {line!r} line on {team}'s card:\n{card}"
        home = self.dir.parent / "teams" / team
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.dir / "data" / "tls" / "ca.crt", home / "ca.crt")  # what the organiser hands out
        out = (home / "bot.log").open("ab")
        self.teams[team] = subprocess.Popen(
            ["bash", "-c", command[1]],
            cwd=home,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped as a group: the shell and its salvo bot
        )

    def stop_team(self, team: str) -> None:
        proc = self.teams.pop(team, None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)

    def team_log(self, team: str) -> str:
        path = self.dir.parent / "teams" / team / "bot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the broker, as a spectator on this laptop ------------------------------------------

    def watch(self) -> Recorder:
        broker = Broker.from_url(f"mqtt://127.0.0.1:{self.ports['SALVO_MQTT_PORT']}")
        end = time.monotonic() + 60
        while True:
            try:
                return Recorder(broker, WATCHED, "night", keep="all")
            except (ConnectionError, TimeoutError):
                if time.monotonic() > end:
                    raise
                time.sleep(1)

    def down(self) -> None:
        for team in list(self.teams):
            self.stop_team(team)
        self.compose("down", "-v", "--remove-orphans", timeout=180, check=False)


def playing(rec: Recorder, min_turn: int = 1) -> tuple[str, str, int] | None:
    """An arena in play at turn ``min_turn`` or later: (arena, game id, turn)."""
    for arena in ("arena1", "arena2", "arena3", "arena4"):
        state, turn, game = (rec.latest(f"/{arena}/game/{t}") for t in ("state", "turn", "id"))
        if state and state.payload == b"turn" and turn and turn.payload and game:
            n = int(turn.json()["turn"])
            if n >= min_turn:
                return arena, game.text, n
    return None


def standings(rec: Recorder) -> dict[str, Any] | None:
    m: Msg | None = rec.latest("/tournament/standings")
    return m.json() if m and m.payload else None
