"""Many arenas in one referee process, on the shipped broker configuration:
all come up, all come back after the broker restarts (a thousand
connections closed at once, read one by one), none claims a take-over that
did not happen, and SIGTERM leaves every one of them 'down'. How fast is
`salvo bench scale`'s business (docs/scaling.md), not this test's."""

from __future__ import annotations

from salvo.net.mqtt import Broker
from salvo.net.watch import Recorder, wait_until
from salvo.tools.stress import RefereeProcess

from conftest import BrokerFactory

ARENAS = 200


def test_two_hundred_arenas_survive_a_broker_restart_and_stop_down(new_broker: BrokerFactory) -> None:
    mosq = new_broker(persistence=False)  # after the restart only what the referee says again is there
    mosq.start()
    league = Broker.from_url(mosq.url("referee"))
    names = [f"arena{i}" for i in range(1, ARENAS + 1)]
    referee = RefereeProcess(league, names, "--log-level", "info", client_id="")
    referee.args[referee.args.index("--arenas") + 1] = str(ARENAS)  # as an organiser types it
    with referee:
        watch = Recorder(league, ["/+/game/server"], label="servers", keep="latest")
        try:
            for name in names:
                watch.wait_for(f"/{name}/game/server", "up")
            mark = watch.mark()
            mosq.restart()
            for name in names:  # every arena said 'up' again, after the restart
                watch.wait_for(f"/{name}/game/server", "up", after=mark, timeout=60)
            assert referee.proc is not None and referee.proc.poll() is None

            def judged() -> bool:  # every drop that looked like a take-over has been judged
                log = referee.log.read_text()
                return log.count("judged in") == log.count("not a take-over") + log.count("TAKEN OVER")

            wait_until(judged, timeout=30, what="the take-over checks")
            assert referee.log.read_text().count("publishing retained state") >= 2 * ARENAS
        finally:
            watch.close()
        watch = Recorder(league, ["/+/game/server"], label="servers-after", keep="latest")
        try:
            referee.stop()
            assert referee.proc.returncode == 0
            for name in names:
                watch.wait_for(f"/{name}/game/server", "down")
        finally:
            watch.close()
    assert "TAKEN OVER" not in referee.log.read_text()
