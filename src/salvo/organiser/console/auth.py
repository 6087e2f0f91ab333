"""Who may use the console: the organiser's password, the sessions it opens
(an unguessable cookie and, per session, the CSRF token the page sends back
in a header), and a limit on wrong passwords per client."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from salvo.web.webserver import ServeError

MIN_PASSWORD = 8
SESSION_TTL_S = 12 * 3600.0  # one tournament night
MAX_SESSIONS = 64  # the oldest go first: a browser that lost its cookie logs in again
FAILURES_ALLOWED = 5  # wrong passwords per client ...
FAILURE_WINDOW_S = 60.0  # ... in this long; then it waits


class ConsoleError(ServeError):
    """The console cannot start as asked (a weak password, a bad certificate, a busy port)."""


def check_password(password: str) -> None:
    """Refuse a password an attendee at the venue could guess."""
    if not password:
        raise ConsoleError("the organiser console needs a password: --console-password or SALVO_CONSOLE_PASSWORD")
    if len(password) < MIN_PASSWORD:
        raise ConsoleError(f"the console password is too short: at least {MIN_PASSWORD} characters")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest()


class Password:
    """Compared in constant time (of equal-length digests: not even the length leaks)."""

    def __init__(self, password: str) -> None:
        check_password(password)
        self._digest = _digest(password)

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(_digest(given), self._digest)


@dataclass(frozen=True)
class Session:
    token: str  # the cookie
    csrf: str  # in the page; sent back as a header on every state-changing request
    expires: float

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """Open sessions, in memory: a restart logs everyone out."""

    def __init__(
        self, ttl_s: float = SESSION_TTL_S, limit: int = MAX_SESSIONS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s, self.limit, self.clock = ttl_s, limit, clock
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Session] = OrderedDict()

    def open(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock() + self.ttl_s)
        with self._lock:
            self._open[session.token] = session
            while len(self._open) > self.limit:
                self._open.popitem(last=False)
        return session

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            session = self._open.get(token)
            if session is not None and session.expires <= self.clock():
                del self._open[token]
                return None
            return session

    def close(self, token: str) -> None:
        with self._lock:
            self._open.pop(token, None)


class LoginLimiter:
    """At most ``allowed`` password attempts per client in ``window_s`` that
    were not the right one. An attempt takes its slot (:meth:`take`) before
    its password is judged, and only the right password gives it back
    (:meth:`succeeded`): guesses sent all at once are held off like guesses
    sent one after the other. Past the limit, :meth:`wait` says how long the
    client must wait before trying again."""

    def __init__(
        self,
        allowed: int = FAILURES_ALLOWED,
        window_s: float = FAILURE_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed, self.window_s, self.clock = allowed, window_s, clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}

    def wait(self, client: str) -> float:
        """Seconds before ``client`` may try a password again (0: now)."""
        now = self.clock()
        with self._lock:
            recent = self._recent(client, now)
            if len(recent) < self.allowed:
                return 0.0
            return max(recent[0] + self.window_s - now, 0.0)

    def take(self, client: str) -> float | None:
        """One of ``client``'s attempts, taken before its password is judged
        (it counts as a wrong one from now on): its stamp for
        :meth:`succeeded`, or None when ``client`` has none left."""
        now = self.clock()
        with self._lock:
            recent = self._recent(client, now)
            if len(recent) >= self.allowed:
                return None
            recent.append(now)
            if len(self._failures) > 10_000:  # a scan from many addresses: forget the idle ones
                for key in [k for k, v in self._failures.items() if not v]:
                    del self._failures[key]
            return now

    def succeeded(self, client: str, stamp: float) -> None:
        """The attempt taken at ``stamp`` was the right password: it does not count."""
        with self._lock:
            recent = self._failures.get(client)
            if recent is not None and stamp in recent:
                recent.remove(stamp)

    def _recent(self, client: str, now: float) -> deque[float]:
        recent = self._failures.setdefault(client, deque())
        while recent and recent[0] <= now - self.window_s:
            recent.popleft()
        return recent
