"""Run a real Eclipse Mosquitto with the project's own mosquitto.conf and the
ACL salvo generates.

Only the container paths and listener ports of ``mosquitto.conf`` are
rewritten; everything else (listeners, TLS settings, anonymous access,
packet limits) is what we ship.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from salvo.organiser import tls
from salvo.organiser.teams import default_acl_path, referee_passwd_path, write_acl_from_passwd
from salvo.organiser.tls import SERVER_CERT, SERVER_KEY
from salvo.tools import localbroker
from salvo.tools.localbroker import run_as_me

ROOT = Path(__file__).resolve().parent.parent

#: Set by conftest for each test: whether it is marked ``broker`` (and so may
#: start a broker: `pytest -m "not broker"` must run without one).
may_start = True

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
    *,
    port: int,
    tls_port: int,
    workdir: Path,
    referee_tls_port: int,
    passwd: Path,
    acl: Path,
    tls_dir: Path,
    persistence: bool = True,
) -> str:
    text = (ROOT / "mosquitto.conf").read_text()
    subs = {  # each line's pattern, its replacement, and how often it must match
        r"^password_file .*/passwd$": (f"password_file {passwd}", 2),  # the teams' listeners
        r"^password_file .*/referee\.passwd$": (f"password_file {referee_passwd_path(passwd)}", 1),
        r"^acl_file .*$": (f"acl_file {acl}", 3),
        r"^persistence_location .*$": (f"persistence_location {workdir}/", 1),
        r"^persistence .*$": (f"persistence {'true' if persistence else 'false'}", 1),
        r"^listener 1883 127\.0\.0\.1$": (f"listener {port} 127.0.0.1", 1),
        # The venue's TLS listener, kept on this machine's loopback here.
        r"^listener 8883$": (f"listener {tls_port} 127.0.0.1", 1),
        r"^listener 8884$": (f"listener {referee_tls_port} 127.0.0.1", 1),
        r"^certfile .*$": (f"certfile {tls_dir / SERVER_CERT}", 2),
        r"^keyfile .*$": (f"keyfile {tls_dir / SERVER_KEY}", 2),
        r"^log_dest .*$": (f"log_dest file {workdir}/mosquitto.log", 1),
    }
    for pattern, (repl, count) in subs.items():
        text, n = re.subn(pattern, repl, text, flags=re.MULTILINE)
        assert n == count, f"mosquitto.conf no longer has {count} line(s) matching {pattern}"
    return text + "\n" + run_as_me()


class Mosquitto(localbroker.Mosquitto):
    """The one launcher (salvo.tools.localbroker) with the shipped conf, the
    ACL salvo generates for ``users`` (all but the referee are teams) and a
    TLS certificate from salvo.organiser.tls for localhost/127.0.0.1, on
    three free loopback ports: plain, TLS, and the referees' TLS (8884)."""

    listeners = 3

    def __init__(self, workdir: Path, persistence: bool = True, users: dict[str, str] | None = None) -> None:
        super().__init__(workdir, persistence=persistence)
        self.users = dict(USERS) if users is None else users
        self.passwd = self.workdir / "passwd"
        write_passwords(self.passwd, self.users)
        # Where salvo.organiser.teams.add_team keeps it for this password file: teams
        # added after construction get their rights.
        self.acl = default_acl_path(self.passwd)
        write_acl_from_passwd(self.passwd, self.acl)
        self.tls = tls.issue(self.workdir / "tls")
        self.ca_file = self.tls.ca_cert

    @property
    def tls_port(self) -> int:
        return self.ports[1]

    @property
    def referee_tls_port(self) -> int:
        """The referees' own TLS listener (mosquitto.conf: 8884)."""
        return self.ports[2]

    def config(self) -> str:
        return render_config(
            port=self.port,
            tls_port=self.tls_port,
            referee_tls_port=self.referee_tls_port,
            workdir=self.workdir,
            passwd=self.passwd,
            acl=self.acl,
            tls_dir=self.tls.directory,
            persistence=self.persistence,
        )

    def start(self, timeout: float = 10.0) -> None:
        if not may_start:
            raise RuntimeError("this test starts mosquitto: mark it broker (or use the broker/new_broker fixtures)")
        super().start(timeout)

    def url(self, user: str | None = None) -> str:
        """The plain (loopback) listener, as ``user`` (None: anonymous)."""
        if user is None:
            return f"mqtt://127.0.0.1:{self.port}"
        return f"mqtt://{user}:{self.users[user]}@127.0.0.1:{self.port}"

    def tls_url(self, user: str | None = None) -> str:
        """The TLS listener (verify it with :attr:`ca_file`)."""
        if user is None:
            return f"mqtts://127.0.0.1:{self.tls_port}"
        return f"mqtts://{user}:{self.users[user]}@127.0.0.1:{self.tls_port}"

    def referee_tls_url(self) -> str:
        """The referees' own TLS listener, as the referee (verify with :attr:`ca_file`)."""
        return f"mqtts://referee:{self.users['referee']}@127.0.0.1:{self.referee_tls_port}"
