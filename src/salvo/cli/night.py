"""``salvo night``: the evening's referee as the main process of a container
(docker-compose.yml), and its healthcheck.

The evening's mode is one setting, ``SALVO_MODE``: ``free-play`` runs
``salvo referee``, ``tournament`` runs ``salvo tournament run``, each with
every setting from the environment. One service runs whichever it is, so
two referees never compete for the arenas, ``docker compose up -d`` brings
back what the evening runs, and switching mode is changing the setting.

Its exit codes are made for Docker's ``restart: on-failure`` (which starts a
container again after a non-zero exit, and, when the engine itself
restarts, only one whose last exit was non-zero):

* stopped by SIGTERM or SIGINT (``docker compose stop``, the engine
  restarting, the laptop shutting down): 128 + the signal, so that the
  engine starts it again when it comes back;
* it cannot run until the organiser acts (a refusal to take the arenas, a
  password refused by the broker, a state file that cannot be written, a
  setting that contradicts the ACL: what natively exits 2, 3 or 4): 0, so
  that Docker leaves it stopped instead of starting it again in a loop.
  Its reason is the last thing it logs;
* anything else (the broker out of reach for 30 s at the start, a bug): 1,
  started again.
"""

from __future__ import annotations

import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from salvo.cli import common
from salvo.cli.common import ExitCode, exit_for
from salvo.failures import Failure

MODES = ("free-play", "tournament")
#: Exits that only the organiser can mend (see the module docstring).
NEEDS_THE_ORGANISER = (ExitCode.USAGE, ExitCode.BROKER_REFUSED, ExitCode.LOCAL_FILE)

_mode_option = click.option(
    "--mode",
    type=click.Choice(MODES),
    default="free-play",
    show_default=True,
    envvar="SALVO_MODE",
    help="The evening's mode: free play (game after game in every arena) or the tournament.",
)
_health_option = click.option(
    "--health-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="data/night-health",
    show_default=True,
    envvar="SALVO_HEALTH_FILE",
    help="Where the running referee reports on itself every second.",
)


@click.group()
def night() -> None:
    """The evening's referee as docker-compose.yml runs it (SALVO_MODE)."""


@night.command("run")
@_mode_option
@_health_option
def run(mode: str, health_file: Path) -> None:
    """Run the evening's mode until stopped: free-play is `salvo referee`,
    tournament is `salvo tournament run --keep-serving` (its console and
    projector stay up after the final ranking). Every setting comes from the
    environment (SALVO_ARENAS, SALVO_STATE, SALVO_FRESH, ...: see .env.example).

    Exit codes, for Docker's restart: on-failure: 128 + the signal when
    stopped; 0 when it cannot run until the organiser acts (the reason is its
    last log line); 1 otherwise.
    """
    from salvo.cli.referee import referee
    from salvo.cli.tournament import run as tournament_run

    _stop_at_once_until_running()
    os.environ["SALVO_HEALTH_FILE"] = str(health_file)  # the command below reads it
    command, args = (referee, []) if mode == "free-play" else (tournament_run, ["--keep-serving"])
    try:
        if os.environ.get("SALVO_USERNAME") and not os.environ.get("SALVO_PASSWORD"):
            raise click.UsageError(
                f"SALVO_PASSWORD is empty: the referee cannot log in as {os.environ['SALVO_USERNAME']!r}. Put its"
                " password in .env (docker compose run --rm -T salvo teams referee prints a new one; then"
                " docker compose kill -s HUP mosquitto, so that the broker knows it)"
            )
        try:
            command.main(args=args, prog_name=f"salvo night run ({mode})", standalone_mode=False)
        except Failure as failure:
            raise exit_for(failure) from None
    except click.ClickException as exc:
        if exc.exit_code not in NEEDS_THE_ORGANISER:
            exc.show()
            raise SystemExit(exc.exit_code) from None
        click.echo(
            f"salvo night ({mode}) stops and stays stopped until the organiser acts"
            f" (salvo would exit {exc.exit_code}; here 0, so that Docker does not start it again in a loop)."
            " Mend what the next lines say, then: docker compose up -d",
            err=True,
        )
        click.echo(exc.format_message(), err=True)
        raise SystemExit(ExitCode.OK) from None
    if common.signalled is not None:
        raise SystemExit(128 + common.signalled.value)


def _stop_at_once_until_running() -> None:
    """A container's PID 1 ignores SIGTERM unless it handles it: a `docker
    compose stop` in the first moments (before the referee installs its own
    handlers, which stop it cleanly) waited 10 s and ended in SIGKILL. Until
    then nothing is published, so stopping at once loses nothing."""

    def now(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, now)


@night.command("health")
@_mode_option
@_health_option
@click.option(
    "--max-age",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="Seconds since the referee's last report that still count as alive.",
)
@click.option(
    "--console",
    "console_at",
    default="127.0.0.1:8470",
    envvar="SALVO_CONSOLE",
    help="(tournament) The console's HOST:PORT, or off: its /health must answer too.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="(tournament) Seconds the console has to answer (the compose healthcheck allows 4 in all).",
)
def health(mode: str, health_file: Path, max_age: float, console_at: str, timeout: float) -> None:
    """Exit 0 when the running `salvo night run` is well: its referee's loop
    reported within --max-age seconds with every arena connected to the
    broker, and (tournament, console on) the director's web server answers
    GET /health with 200 within --timeout (its loop came round, every arena
    connected). Else exit 1, saying why: a frozen
    process, a lost broker and a wedged director all fail it."""
    problem = _report_problem(health_file, max_age)
    if problem is None and mode == "tournament" and console_at != "off" and os.environ.get("SALVO_CONSOLE_PASSWORD"):
        problem = _console_problem(console_at, timeout)
    if problem is not None:
        click.echo(f"unhealthy: {problem}", err=True)
        raise SystemExit(ExitCode.FAILED)
    click.echo("ok")


def _report_problem(path: Path, max_age: float) -> str | None:
    try:
        age, text = time.time() - path.stat().st_mtime, path.read_text().strip()
    except OSError:
        return f"no report in {path} (not started yet?)"
    if age > max_age:
        return f"the referee's last report is {age:.0f} s old: its loop is stuck or the process is frozen"
    return None if text.startswith("ok") else text


def _console_problem(console_at: str, timeout: float) -> str | None:
    port = console_at.rpartition(":")[2]
    # The console's own certificate, whatever name it was issued for: this
    # asks whether it answers, not who it is.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    last = "no answer"
    for scheme in ("https", "http"):
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/health", timeout=timeout, context=unverified):
                return None
        except urllib.error.HTTPError as exc:
            return f"the console's /health says {exc.code}: {exc.read(300).decode('utf-8', 'replace').strip()}"
        except (OSError, ssl.SSLError) as exc:  # refused, timed out, or plain HTTP spoken to TLS
            last = str(exc)
    return f"the console does not answer on port {port} within {timeout:g} s ({last})"
