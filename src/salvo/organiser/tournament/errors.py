"""The tournament's own failure."""

from __future__ import annotations

from salvo.failures import Failure


class TournamentError(Failure):
    """The tournament cannot start or carry on: too few teams, a state file
    of another tournament, a broker out of reach."""
