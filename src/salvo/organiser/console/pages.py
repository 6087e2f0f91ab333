"""The two pages (the login form and the console), shipped in the package:
nothing is fetched from elsewhere, so the console works on a venue network
without the internet. Style and script are inlined into each page with a
per-response nonce, so the Content-Security-Policy allows no other script at
all, and the console's CSRF token is written into its page."""

from __future__ import annotations

import html
import json
import secrets
from dataclasses import dataclass
from importlib.resources import files

from salvo.organiser.tournament.controls import ACTIONS


def _static(name: str) -> str:
    return (files("salvo.organiser.console") / "static" / name).read_text(encoding="utf-8")


def security_headers(nonce: str | None = None) -> dict[str, str]:
    """For every response: no framing (a control is a click), no sniffing,
    no referrer to other sites, no caching of the tournament's state."""
    inline = f"'nonce-{nonce}'" if nonce else "'none'"
    policy = (
        f"default-src 'none'; script-src {inline}; style-src {inline}; connect-src 'self'; "
        "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",  # "no-referrer" makes Chromium send Origin: null
        "Cache-Control": "no-store",
    }


@dataclass(frozen=True)
class Page:
    body: str
    headers: dict[str, str]


# Links to the projector and the replays, when this server serves them.
ROOM = (
    '<nav id="room" aria-label="the room"><span class="muted">Room</span> '
    '<a href="/projector" target="_blank" rel="noopener">projector</a> '
    '<a href="/replay" target="_blank" rel="noopener">replays</a></nav>'
)


class Pages:
    def __init__(self, room: bool = False) -> None:
        css = _static("console.css")
        self._login = _static("login.html").replace("/*CSS*/", css)
        # The actions' help (button titles, the dialog), as data the script reads.
        actions = json.dumps({a.name: {"args": a.args, "help": a.help} for a in ACTIONS.values()})
        console = _static("console.html").replace("{{ACTIONS}}", actions.replace("<", "\\u003c"))
        console = console.replace("{{ROOM}}", ROOM if room else "")
        self._console = console.replace("/*CSS*/", css).replace("/*JS*/", _static("console.js"))

    def login(self, message: str = "") -> Page:
        nonce = secrets.token_urlsafe(16)
        body = self._login.replace("{{NONCE}}", nonce).replace("{{MESSAGE}}", html.escape(message))
        return Page(body, security_headers(nonce))

    def console(self, csrf: str) -> Page:
        nonce = secrets.token_urlsafe(16)
        body = self._console.replace("{{NONCE}}", nonce).replace("{{CSRF}}", html.escape(csrf))
        return Page(body, security_headers(nonce))
