"""A team's side: play wherever ``/tournament/assignments/<team>`` says,
game after game, until it says done. That topic holds (retained JSON):

- ``{"id", "round", "arena", "opponents": [...], "opponent"}``: play one
  game in that arena (``opponent`` only in a duel; a new ``id`` for every
  assignment, also when a game is played again);
- ``{"waiting": "why"}``: nothing to play yet (registered late and waiting
  for the organisers, or admitted and waiting for a first game);
- ``{"done": true}`` (with ``"withdrawn": true`` or ``"refused": "why"``):
  the tournament is over for this team;
- empty: nothing to play now (between games, or the director is restarting).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from salvo.net.mqtt import Broker
from salvo.spec.topics import TournamentTopics

if TYPE_CHECKING:
    from salvo.sdk.client import SalvoClient
    from salvo.sdk.view import View

log = logging.getLogger("salvo.organiser.tournament")


def follow(
    broker: Broker,
    name: str,
    secret: str,
    strategy_factory: Callable[[], Any],
    *,
    on_game: Callable[[Any], None] | None = None,
    username: str | None = None,
    password: str | None = None,
    client: SalvoClient | None = None,
    wait_after_done: bool = False,
) -> int:
    """Play every game assigned to ``name``; the number of games played.
    With ``wait_after_done`` (a house bot, a service) the end of one
    tournament is not the end: it waits for the next one's assignments.

    One connection does it all, the whole evening: it reads the assignment
    and moves from arena to arena (:meth:`SalvoClient.enter`). ``client``
    is that connection when the caller owns it (``salvo bot --tournament``:
    started, possibly not yet connected; closing it ends this with
    ConnectionError); otherwise one is made here and closed at the end."""
    from salvo.sdk.client import SalvoClient
    from salvo.sdk.outcomes import JoinRefused, LobbyClosed

    topic = TournamentTopics.assignment(name)
    own = client is None
    me = client or SalvoClient(name, secret, broker, username=username, password=password).connect()
    me.also_read(topic)
    played: set[str] = set()
    told: str | None = None
    try:
        while True:
            # The latest assignment only: one replaced meanwhile (a game called
            # off and given again, the tournament over) is not played.
            me.wait_until(functools.partial(_latest_fresh, me, topic, played, told), timeout=None)
            payload = me.latest(topic)
            if not _fresh(payload, played, told):  # replaced again meanwhile
                continue
            assert payload is not None
            job = json.loads(payload)
            if job.get("done"):
                if job.get("refused") or job.get("withdrawn"):
                    log.warning("%s: %s", name, job.get("refused") or "withdrawn from the tournament")
                if not wait_after_done:
                    return len(played)
                told = _DONE  # until the topic says something else: another night
                log.info("%s: the tournament is done; waiting for the next one", name)
                continue
            if "waiting" in job:
                told = str(job["waiting"])
                log.warning("%s: %s", name, told)
                continue
            key = _key(job)
            played.add(key)
            log.info("%s: round %s in arena %s", name, job["round"], job["arena"])
            me.enter(job["arena"])
            try:
                me.play(strategy_factory(), games=1, on_game=on_game)
            except LobbyClosed as exc:  # a no-show, an abort: the organisers say what next
                log.warning("%s: the game in %s was called off (%s); waiting for the next", name, job["arena"], exc)
            except JoinRefused as exc:  # e.g. came too late: the game was forfeited meanwhile
                log.warning("%s: not admitted to %s: %s; waiting for the next", name, job["arena"], exc)
            except TimeoutError as exc:  # the referee (or the broker) did not answer in time: try again
                log.warning("%s: no answer in %s (%s); trying again", name, job["arena"], exc)
                played.discard(key)
    finally:
        if own:
            me.close()


def _key(job: dict[str, Any]) -> str:
    """An assignment's identity: its id (a game played again after an abort
    or a void comes with a new one), or round and arena from older directors."""
    return str(job.get("id") or f"{job.get('round')}@{job.get('arena')}")


def _latest_fresh(me: SalvoClient, topic: str, played: set[str], told: str | None, _view: View) -> bool:
    return _fresh(me.latest(topic), played, told)


#: What ``told`` holds once a tournament said done (follow's wait_after_done).
_DONE = "\0done"


def _fresh(payload: bytes | None, played: set[str], told: str | None) -> bool:
    if not payload:
        return False
    try:
        job = json.loads(payload)
    except ValueError:
        return False
    if not isinstance(job, dict):
        return False
    if job.get("done"):
        return told != _DONE
    if "waiting" in job:
        return str(job["waiting"]) != told
    return isinstance(job.get("round"), int) and isinstance(job.get("arena"), str) and _key(job) not in played
