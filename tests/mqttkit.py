"""Test glue for the real broker: the neutral watcher (salvo.net.watch) and the
conformance suite's scripted team, logged in as users of the test mosquitto."""

from __future__ import annotations

from salvo.net.mqtt import Broker
from salvo.net.watch import Keep, Msg, wait_until
from salvo.net.watch import Recorder as _Recorder
from salvo.spec.topics import Topics
from salvo.tools.conformance.harness import Team

from mosquitto import Mosquitto

__all__ = ["Msg", "Recorder", "Team", "connect_team", "wait_until"]


class Recorder(_Recorder):
    """salvo.net.watch's recorder, logged in as a test-broker user (None: anonymous)."""

    def __init__(
        self, broker: Mosquitto, user: str | None, filters: list[str] | tuple[str, ...], *, keep: Keep = "all"
    ) -> None:
        super().__init__(Broker.from_url(broker.url(user)), filters, label="test", keep=keep)


def connect_team(
    broker: Mosquitto, prefix: str, name: str, secret: str | None = None, login: str | None = None
) -> Team:
    """The suite's scripted team on a connection of its own that reads its
    private and the public topics. It logs in as ``login``, else with its
    name when the broker knows it, else with the referee's login (a name no
    team login has). Close it with ``team.conn.close()``."""
    t = Topics(prefix)
    user = login or (name if name in broker.users else "referee")
    conn = Recorder(broker, user, [t.private_filter(name), *t.public_filters])
    return Team(conn, t, name, secret or f"{name}-secret-for-tests")
