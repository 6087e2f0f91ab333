"""Run a real Eclipse Mosquitto with the project's own mosquitto.conf and ACL.

Only the container paths and listener ports of ``mosquitto.conf`` are
rewritten; everything else (ACL, anonymous access, packet limits) is what we
ship.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from salvo.perf import free_port, mosquitto_binary

ROOT = Path(__file__).resolve().parent.parent

USERS = {
    "referee": "referee-pw",
    "alice": "alice-pw",
    "bob": "bob-pw",
    "carol": "carol-pw",
    "dave": "dave-pw",
    "mallory": "mallory-pw",
}


def write_passwords(path: Path, users: dict[str, str]) -> None:
    path.write_text("")
    path.chmod(0o600)
    for user, password in users.items():
        subprocess.run(["mosquitto_passwd", "-b", str(path), user, password], check=True, capture_output=True)


def render_config(
    *, port: int, ws_port: int, workdir: Path, passwd: Path, acl: Path | None = None, persistence: bool = True
) -> str:
    text = (ROOT / "mosquitto.conf").read_text()
    subs = {
        r"^password_file .*$": f"password_file {passwd}",
        r"^acl_file .*$": f"acl_file {acl or ROOT / 'mosquitto.acl'}",
        r"^persistence_location .*$": f"persistence_location {workdir}/",
        r"^persistence .*$": f"persistence {'true' if persistence else 'false'}",
        r"^listener 1883$": f"listener {port} 127.0.0.1",
        r"^listener 9001$": f"listener {ws_port}",
        r"^log_dest .*$": f"log_dest file {workdir}/mosquitto.log",
    }
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text, flags=re.MULTILINE)
        assert n == 1, f"mosquitto.conf no longer has one line matching {pattern}"
    if os.geteuid() == 0:
        # As root mosquitto drops to user "mosquitto", which cannot read our files.
        text += f"\nuser {getpass.getuser()}\n"
    return text


@dataclass
class Mosquitto:
    workdir: Path
    persistence: bool = True
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))
    port: int = field(default_factory=free_port)
    ws_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.passwd = self.workdir / "passwd"
        write_passwords(self.passwd, self.users)
        self.conf = self.workdir / "mosquitto.conf"
        self.conf.write_text(
            render_config(
                port=self.port,
                ws_port=self.ws_port,
                workdir=self.workdir,
                passwd=self.passwd,
                persistence=self.persistence,
            )
        )

    def start(self, timeout: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"mosquitto exited: {err}\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not start listening")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.workdir / "mosquitto.log"
        return path.read_text() if path.exists() else ""

    def url(self, user: str | None = None) -> str:
        if user is None:
            return f"mqtt://127.0.0.1:{self.port}"
        return f"mqtt://{user}:{self.users[user]}@127.0.0.1:{self.port}"
