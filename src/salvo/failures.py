"""Failures an organiser can act on, classified by what they have to do.

The class says the remedy, the message says the details: the command line
turns :class:`BrokerRefusal` into exit 3 and :class:`LocalFailure` into exit
4, any other :class:`Failure` into exit 1 (see ``salvo.cli``). Nothing here
depends on the command line.
"""

from __future__ import annotations


class Failure(Exception):
    """Something stopped the work; the message says what and what to do."""


class BrokerRefusal(Failure):
    """The broker refused our credentials or authorisation: retrying will not help."""


class LocalFailure(Failure):
    """A local file (the referee's key, its state file, a team registry)
    cannot be used, or what it holds conflicts with what runs (an arena
    another referee holds)."""


class MissingExtra(Failure):
    """A command needs an optional dependency that is not installed: the
    message names the ``pip install 'salvo[...]'`` that brings it."""
