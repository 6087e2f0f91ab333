"""A tournament night: fixtures onto arenas, results from the referee,
standings for everybody, controls for the organisers.

The director runs the referee for its arenas in the same process and
restricts each arena's lobby to the teams assigned there. Teams learn where
to play from ``/tournament/assignments/<team>`` (see :mod:`salvo.sdk.follow`);
standings are retained at ``/tournament/standings``, the fixtures at
``/tournament/schedule``. Everything decided is kept in a JSON state file, so
a restarted director carries on where it was.

The modules: :mod:`.formats` (who meets whom), :mod:`.scoring` (points,
tie-breaks), :mod:`.state` (what is decided), :mod:`.director` (the night's
steps, on the referee's loop), :mod:`.games` (each arena's game to its
result), :mod:`.steps` (waiting for the referee without blocking that loop),
:mod:`.health` (what it reports), :mod:`.adoption` (restarts), :mod:`.actions` and :mod:`.controls` (the
organiser's controls), :mod:`.spool` (controls from the CLI), :mod:`.reports`
(status and exports), :mod:`.night` (running it); a team's side is
:mod:`salvo.sdk.follow`.
"""

from __future__ import annotations

from salvo.organiser.tournament.director import Director
from salvo.organiser.tournament.errors import TournamentError
from salvo.organiser.tournament.formats import default_rounds, round_robin
from salvo.organiser.tournament.night import entrants, hold, no_show_error, restrict_lobbies
from salvo.organiser.tournament.scoring import GameResult, Row, ranking_text, standings
from salvo.organiser.tournament.state import FORMATS, State, plan

__all__ = [
    "FORMATS",
    "Director",
    "GameResult",
    "Row",
    "State",
    "TournamentError",
    "default_rounds",
    "entrants",
    "hold",
    "no_show_error",
    "plan",
    "ranking_text",
    "restrict_lobbies",
    "round_robin",
    "standings",
]
