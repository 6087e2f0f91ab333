"""The ``nats`` scenario of ``salvo stress chaos`` (issue 29, "nothing lost,
third round"): games on a three-node NATS cluster (JetStream, MQTT:
:class:`salvo.tools.natscluster.NatsCluster`) whose nodes are killed.

The referee process gets ``--broker`` with node URLs, comma-separated (it
moves to the next node when it loses one, docs/scaling.md); the teams
publish on a connection of their own that does the same. A node is killed
(SIGKILL) at chosen points -- the referee's node mid-salvo, the teams' node
mid-salvo, a node between turns -- and at random instants, and started
again after a short outage (1-5 s; the next kill waits until every node is
ready again, so the cluster keeps its quorum). The model judges every game
as in the other scenarios.

The judge's eye is on node 3, which is never killed: the watcher must see
every message, and a reader that loses its node only catches up from the
retained values (a hit published meanwhile would look lost). So the
referee lists n1,n2 and the teams n2,n1: both are on killed nodes, and a
node that is never killed would only be a place for them to sit out the
faults.

NATS's MQTT is not mosquitto's, and the judgement allows for it, each
allowance with its reason:

* a team's node lost mid-salvo: its client resends its unacknowledged
  fires on the next node, and the teams send the salvo again once the
  referee answers (as the SDK does): the referee must ignore the copies;
* the referee acknowledges a fire only once journaled; one it had received
  but not acknowledged when its node died comes again after JetStream's
  ``ack_wait`` (30 s), possibly in the next game. The referee tells its
  sender privately (``/players/<team>/error``, code ``wrong_game``, naming
  the previous game), not the room: that report is for a message the team
  did send, so it is counted as tolerated, not as a violation (any other
  error report still is);
* the shots of a salvo caught by a node's loss may reach the referee in
  another order than they were sent (the fires in flight come again after
  the reconnect, or after ack_wait, behind later ones): the referee numbers
  shots as they arrive, so a hit may carry another shot number than the
  team's order. Every shot must still have exactly one hit, on a cell of
  the salvo, and the salvo record its count (check's ``unordered``);
* the turn timeout is 45 s, above that 30 s redelivery (a shot in flight at
  a random kill arrives only then; the time the referee is away is given
  back to the turn anyway).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time

from salvo.spec.topics import Inbound, Outbound, Topics
from salvo.tools.chaosdriver import Fault, Options, Run, Stalled
from salvo.tools.chaosgames import Plan, Report, play_games
from salvo.tools.chaosprocs import ChaosReferee
from salvo.tools.chaoswatch import Watcher
from salvo.tools.gamemodel import Violation
from salvo.tools.localbroker import server_binary
from salvo.tools.natscluster import NatsCluster

NODE_KILLS = {
    "referee": "the referee's NATS node killed mid-salvo",
    "teams": "the teams' NATS node killed mid-salvo",
    "both": "the NATS node of the referee and the teams killed mid-salvo",
    "between": "a NATS node killed between turns",
    "random": "a NATS node killed at a random instant",
}
#: the judge's node, never killed; the others are
JUDGE, KILLABLE = 3, (1, 2)
TURN_TIMEOUT = 45.0


def _nats_binary() -> bool:
    try:
        server_binary("nats-server")  # where NatsCluster looks for it too
    except RuntimeError:
        return False
    return True


class Nodes:
    """The cluster, one node down at a time: a kill waits until every node
    is ready again after the previous one."""

    def __init__(self, cluster: NatsCluster, o: Options) -> None:
        self.cluster, self.o = cluster, o
        self.ready = threading.Event()
        self.ready.set()
        self.port = {n.mqtt: i for i, n in cluster.nodes.items()}

    def of_referee(self, run: Run) -> int | None:
        """The node the referee connected to last (its log says so)."""
        found = re.findall(r"connected to 127\.0\.0\.1:(\d+)", run.ref.text(run.ref.since))
        return self.port.get(int(found[-1])) if found else None

    def of_teams(self, run: Run) -> int | None:
        return self.port.get(run.watch.sender.endpoint[1])

    def kill(self, run: Run, node: int, label: str) -> Fault:
        if not self.ready.wait(120):
            raise Stalled("a killed NATS node did not come back within 120 s")
        outage = 1.0 if self.o.sample else run.bg.uniform(1, 5)
        with run.lock:
            self.ready.clear()
            self.cluster.kill(node)
            fault = run.fault(label, node=f"n{node}", outage_s=round(outage, 1))
        started = time.monotonic()

        def later() -> None:
            time.sleep(outage)
            try:
                self.cluster.start_node(node)
                self.cluster.wait_ready(90)
            except (RuntimeError, OSError) as exc:  # (OSError: the run ended and took the cluster's files)
                run.violation("stalled", f"NATS node n{node} did not come back: {exc}")
                return
            fault.outcome["back_s"] = round(time.monotonic() - started, 1)
            self.ready.set()

        threading.Thread(target=later, daemon=True).start()
        return fault


def _tolerate(run: Run) -> None:
    """A ``wrong_game`` report to a team for a shot of a game before this one
    (JetStream's redelivery after ack_wait, see the module): not a fault."""

    def late_shot(v: Violation) -> bool:
        if v.kind != "error" or not 0 <= v.at < len(run.watch.messages):
            return False
        m = run.watch.messages[v.at]
        t = Topics(run.prefix)
        route = t.parse_outbound(m.topic)
        if route is None or route.kind not in (Outbound.PLAYER_ERROR, Outbound.SHIP_ERROR):
            return False
        with_ids = json.loads(m.text)
        named = re.findall(r"(?:previous|earlier) game '([^']+)'", str(with_ids.get("error", "")))
        return (
            with_ids.get("code") == "wrong_game"
            and (shot := t.parse_inbound(str(with_ids.get("topic", "")))) is not None
            and shot.kind is Inbound.FIRE
            and bool(named)
            and named[0] in run.ids
            and named[0] != run.game_id
        )

    run.tolerate = late_shot


def _nats(o: Options, rep: Report) -> None:
    if not _nats_binary():
        rep.skipped["nats"] = "no nats-server here (Debian's package nats-server)"
        return
    with NatsCluster(3, o.workdir / "nats") as cluster:
        nodes = Nodes(cluster, o)
        judge = cluster.broker(JUDGE)
        referee, teams = cluster.broker(1, 2), cluster.broker(2, 1)
        kinds = ("referee", "teams", "between")

        def prepare(run: Run) -> None:
            # The watcher play_games made is on the judge's node; the teams
            # get their own connection, and the referee the killable nodes.
            run.watch.close()
            run.watch = Watcher(judge, run.prefix, teams=teams)
            run.ref = ChaosReferee(referee, run.prefix, run.flags, run.dir)
            _tolerate(run)
            run.unordered = True

        def plan(run: Run) -> Plan:
            # one chosen kill a game, the three kinds in turn (and random ones beside)
            kind = kinds[run.games % 3]
            n = run.rng.randint(2, 5)
            if kind == "between":
                return {("turn", n): kind}
            return {("shot", 10 * n + run.rng.randint(1, 3)): kind}

        def inject(run: Run, action: str) -> None:
            if action == "between":
                nodes.kill(run, run.rng.choice(KILLABLE), NODE_KILLS["between"])
                return
            on_ref, on_teams = nodes.of_referee(run), nodes.of_teams(run)
            node = on_ref if action == "referee" else on_teams
            if node not in KILLABLE:
                return  # not known yet (between two connections): no fault here
            assert node is not None
            kind = "both" if on_ref == on_teams else action
            nodes.kill(run, node, NODE_KILLS[kind])

            def resume() -> None:
                """The referee answers again: the salvo sent again, as the SDK does."""
                run.probe()
                for topic, payload in run.sent:
                    run.publish(topic, payload)

            run.pending.append(resume)

        def random_kills(run: Run, stop: threading.Event) -> None:
            while not stop.wait(run.bg.uniform(6, 20)):
                try:
                    nodes.kill(run, run.bg.choice(KILLABLE), NODE_KILLS["random"])
                except Stalled as exc:
                    run.violation("stalled", str(exc))
                    return

        play_games(
            dataclasses.replace(o, broker=judge),
            rep,
            "nats",
            plan,
            inject,
            lambda g, f: g < o.games or f < o.kills,
            turn_timeout=TURN_TIMEOUT,
            background=random_kills,
            prepare=prepare,
        )


RUNNERS = {"nats": _nats}
