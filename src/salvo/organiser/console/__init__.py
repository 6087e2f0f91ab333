"""The organiser console: a web page behind the organiser's password (over
TLS when given a certificate) with the live state of every arena and of the
tournament, the organiser's controls (:mod:`salvo.organiser.tournament.controls`) and
the exports. Its HTML, CSS and script ship in the package: nothing is
fetched from the internet at the venue.

``create_app`` is the Starlette application; :class:`Console` serves it with
uvicorn in a thread, the projector and the replays (:mod:`salvo.web.spectate`)
beside it on the same server.
"""

from __future__ import annotations

from salvo.organiser.console.app import create_app
from salvo.organiser.console.auth import MIN_PASSWORD, ConsoleError, check_password
from salvo.organiser.console.server import Console

__all__ = ["MIN_PASSWORD", "Console", "ConsoleError", "check_password", "create_app"]
