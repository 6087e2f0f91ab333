"""The organiser console: a web page behind the organiser's password (over
TLS when given a certificate) with the live state of every arena and of the
tournament, the organiser's controls (:mod:`salvo.tournament.controls`) and
the exports. Its HTML, CSS and script ship in the package: nothing is
fetched from the internet at the venue.

``create_app`` is the Starlette application; :class:`Console` serves it with
uvicorn in a thread.
"""

from __future__ import annotations

from importlib.util import find_spec

from salvo.failures import MissingExtra

if find_spec("starlette") is None or find_spec("uvicorn") is None:  # pragma: no cover - the installation
    # the 'organiser' extra: only the organiser's laptop serves the console
    raise MissingExtra(
        "the organiser console needs the 'organiser' extra: pip install 'salvo[organiser]' (starlette, uvicorn)"
    )

from salvo.console.app import create_app
from salvo.console.auth import MIN_PASSWORD, ConsoleError, check_password
from salvo.console.server import Console

__all__ = ["MIN_PASSWORD", "Console", "ConsoleError", "check_password", "create_app"]
