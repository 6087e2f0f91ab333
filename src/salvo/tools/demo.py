"""``salvo demo``: a whole game on one machine, nothing to set up.

An embedded MQTT broker (amqtt, in-process, on a free local port) unless a
broker URL is given, the real referee with short timeouts, and bots with
mixed strategies playing over MQTT, while the terminal shows every board as
the referee sees it (rich).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from salvo.arena.resume import make_arenas
from salvo.game.events import Config
from salvo.net.mqtt import Broker, connect_async, new_client
from salvo.referee.service import Referee
from salvo.sdk.bots import STRATEGIES, make_strategy
from salvo.sdk.client import SalvoClient
from salvo.sdk.outcomes import GameRecord
from salvo.sdk.strategy import Strategy
from salvo.sdk.view import Shot, View, parse_names
from salvo.spec import crypto, wire
from salvo.spec.rules import BOARD_SIZE, FLEET, Placement, cell
from salvo.spec.topics import Outbound, Topics
from salvo.tools.localbroker import EmbeddedBroker

NAMES = ("ada", "grace", "alan", "edsger", "barbara", "donald", "ken", "margaret")


@dataclass
class ShownBoard:
    """One player's board as the referee sees it."""

    name: str
    strategy: str
    fleet: dict[str, Placement] = field(default_factory=dict)
    shots: set[int] = field(default_factory=set)  # cells shot at
    sunk: list[str] = field(default_factory=list)
    defeated: bool = False

    def ship_cells(self) -> dict[int, str]:
        return {c: s for s, p in self.fleet.items() for c in p.cells(FLEET[s])}


class Spectator:
    """The demo's picture of the game, fed from every topic of the arena."""

    def __init__(self, topics: Topics) -> None:
        self.t = topics
        self.boards: dict[str, ShownBoard] = {}
        self.state = "lobby"
        self.turn: wire.TurnInfo | None = None
        self.log: list[str] = []
        self.winner: str | None = None
        self.summary: wire.StatsSummary | None = None
        self.stats: dict[str, wire.PlayerStats] = {}
        self.players: list[str] = []
        self.games_over = 0
        self.last_message = time.monotonic()
        self._lock = threading.Lock()

    def board(self, name: str) -> ShownBoard:
        return self.boards.setdefault(name, ShownBoard(name, "?"))

    def feed(self, topic: str, payload: bytes) -> None:
        text = payload.decode("utf-8", "replace")
        self.last_message = time.monotonic()
        with self._lock, contextlib.suppress(ValueError):
            self._feed(topic, text)

    def _feed(self, topic: str, text: str) -> None:
        route = self.t.parse_outbound(topic)
        if route is None:
            return
        kind, name = route.kind, route.name
        if kind is Outbound.WINNER:
            self.winner = text or None
        elif not text:
            return  # a retained topic cleared
        elif kind is Outbound.STATE:
            if text == "over":
                self.games_over += 1
            if text == "lobby" and self.state == "over":
                self.log.append("-- the lobby reopens --")
                for b in self.boards.values():
                    b.shots.clear()
                    b.sunk.clear()
                    b.defeated = False
                self.winner, self.summary, self.stats, self.players = None, None, {}, []
            self.state = text
        elif kind is Outbound.TURN:
            self.turn = wire.TurnInfo.model_validate_json(text)
        elif kind is Outbound.PLAYERS_LIST:
            self.players = parse_names(text)
        elif kind is Outbound.SALVO:
            s = wire.SalvoResult.model_validate_json(text)
            self.log.append(f"turn {s.turn}: {s.player} fired {s.shots}, {s.hits} hit{'s' * (s.hits != 1)}")
        elif kind is Outbound.STATS_SUMMARY:
            self.summary = wire.StatsSummary.model_validate_json(text)
        elif kind is Outbound.STATS_PLAYER:
            self.stats[name] = wire.PlayerStats.model_validate_json(text)
        elif kind is Outbound.HIT:
            hit = wire.Hit.model_validate_json(text)
            self.board(name).shots.add(cell(hit.x, hit.y))
        elif kind is Outbound.DEFEATED and text == "true":
            self.board(name).defeated = True
            self.log.append(f"[bold red]{name} is defeated[/]")
        elif kind is Outbound.SUNK and text == "true":
            self.board(name).sunk.append(route.ship)
            self.log.append(f"{name}'s {route.ship} sank")

    # -- rendering ------------------------------------------------------------

    def render(self, title: str) -> Group:
        with self._lock:
            head = Text(title, style="bold")
            if self.turn and self.state == "turn":
                head.append(f"   turn {self.turn.turn}: {self.turn.player} fires {self.turn.shots}")
            elif self.state == "over":
                head.append(f"   game over, winner: {self.winner or 'nobody'}", style="bold green")
            else:
                head.append(f"   {self.state}")
            grid = Table.grid(padding=(0, 2))
            boards = [self._board_panel(b) for b in self.boards.values()]
            for row in _batched(boards, 4):
                grid.add_row(*row)
            events = Text.from_markup("\n".join(self.log[-6:]) or "waiting for the first salvo...")
            return Group(head, grid, Panel(events, title="events", border_style="dim"))

    def _board_panel(self, b: ShownBoard) -> Panel:
        ships = b.ship_cells()
        sunk_cells = {c for c, s in ships.items() if s in b.sunk}
        text = Text()
        for y in range(BOARD_SIZE):
            for x in range(BOARD_SIZE):
                c = cell(x, y)
                if c in sunk_cells:
                    text.append("█ ", style="red3")
                elif c in ships and c in b.shots:
                    text.append("✖ ", style="bold red")
                elif c in ships:
                    text.append("■ ", style="cyan")
                elif c in b.shots:
                    text.append("· ", style="white")
                else:
                    text.append("~ ", style="blue dim")
            if y < BOARD_SIZE - 1:
                text.append("\n")
        afloat = len(FLEET) - len(b.sunk)
        status = "[bold red]defeated[/]" if b.defeated else f"{afloat} afloat"
        current = self.turn is not None and self.turn.player == b.name and self.state == "turn"
        return Panel(
            text,
            title=f"{'▶ ' if current else ''}{b.name} [dim]{b.strategy}[/]",
            subtitle=status,
            border_style="yellow" if current else "white",
            width=25,
        )

    def complete(self) -> bool:
        """Every participant's stats of the finished game have arrived."""
        with self._lock:
            return self.state != "turn" and bool(self.players) and set(self.players) <= set(self.stats)

    def results_table(self) -> Table:
        with self._lock:
            return self._results_table()

    def _results_table(self) -> Table:
        table = Table(
            title=f"winner: {self.winner or 'nobody'}",
            title_style="bold green",
            caption="sunk: ships sunk; lost: own ships lost; out: turn of defeat",
        )
        for col in ("#", "player", "strategy", "shots", "hits", "acc", "sunk", "lost", "out"):
            table.add_column(col, justify="right" if col not in ("player", "strategy") else "left", no_wrap=True)
        for name, s in sorted(self.stats.items(), key=lambda kv: kv[1].place):
            table.add_row(
                str(s.place),
                name,
                self.board(name).strategy,
                str(s.shots),
                str(s.hits),
                f"{s.accuracy:.0%}",
                str(s.ships_sunk),
                str(s.ships_lost),
                str(s.defeated_in_turn or "-"),
            )
        return table


def _batched(items: list[Panel], n: int) -> Iterator[tuple[Panel, ...]]:
    for i in range(0, len(items), n):
        yield tuple(items[i : i + n])


class PacedStrategy(Strategy):
    """A strategy that waits ``delay`` seconds before each salvo, so people
    can follow, and reports its fleet to the spectator."""

    def __init__(self, inner: Strategy, delay: float, board: ShownBoard) -> None:
        super().__init__()
        self.inner, self.delay, self.board = inner, delay, board

    def place_fleet(self) -> dict[str, Placement]:
        self.board.fleet = self.inner.place_fleet()
        return self.board.fleet

    def choose(self, view: View, shots: int) -> list[Shot]:
        time.sleep(self.delay)
        return self.inner.choose(view, shots)


@dataclass
class DemoResult:
    winners: list[str | None]
    records: dict[str, list[GameRecord]]


QUIET_S = 10.0
"""How long the demo's watcher may hear nothing once the bots are done."""


def run_demo(
    *,
    bots: int = 4,
    games: int = 1,
    broker_url: str | None = None,
    username: str | None = None,
    password: str | None = None,
    prefix: str = "demo",
    delay: float = 0.2,
    turn_timeout: float = 5.0,
    seed: int | None = None,
    console: Console | None = None,
) -> DemoResult:
    """Run the demo; returns the winner of each game."""
    console = console or Console()
    embedded = EmbeddedBroker().start() if broker_url is None else None
    url = embedded.url if embedded else broker_url
    assert url is not None
    broker = Broker.from_url(url).with_credentials(username, password)
    topics = Topics(prefix)
    spectator = Spectator(topics)
    game_seed = seed if seed is not None else int(time.time())
    names = list(NAMES[:bots])
    kinds = list(STRATEGIES)
    records: dict[str, list[GameRecord]] = {}
    threads: list[threading.Thread] = []
    clients: list[SalvoClient] = []
    with tempfile.TemporaryDirectory() as tmp:
        key = crypto.load_or_create_referee_key(Path(tmp) / "referee.key")
        config = Config(
            placement_timeout=10, turn_timeout=turn_timeout, reset_after=2, min_players=bots, max_players=bots
        )
        referee = Referee(make_arenas([prefix], config, game_seed, key), broker, client_id=f"salvo-demo-{prefix}")
        watch = new_client(broker, f"salvo-demo-watch-{prefix}")
        watch.on_connect = lambda c, *_: c.subscribe(topics.everything(), 1)
        watch.on_message = lambda _c, _u, m: spectator.feed(m.topic, bytes(m.payload))
        try:
            referee.start()
            if not referee.wait_connected(15):
                raise ConnectionError(f"the referee cannot reach the broker at {broker.url}")
            connect_async(watch, broker)
            watch.loop_start()
            for i, name in enumerate(names):
                kind = kinds[i % len(kinds)]
                board = spectator.board(name)
                board.strategy = kind
                strategy = PacedStrategy(make_strategy(kind, f"{game_seed}/{name}"), delay, board)
                client = SalvoClient(
                    name,
                    f"{name}-demo-secret",
                    broker,
                    prefix=prefix,
                    username=broker.username,
                    password=broker.password,
                ).connect()
                clients.append(client)
                records[name] = []
                thread = threading.Thread(
                    target=lambda c=client, s=strategy, n=name: records[n].extend(c.play(s, games=games)),
                    name=f"bot-{name}",
                    daemon=True,
                )
                thread.start()
                threads.append(thread)
            printed = 0
            with Live(spectator.render("salvo demo"), console=console, refresh_per_second=8) as live:
                # Until every game's table is printed: the watcher may lag the bots (all of them share
                # one process and, without mosquitto, a Python broker), so the bots finishing is not
                # the end; only a watcher that has heard nothing for QUIET_S is given up on.
                while printed < games:
                    game_no = min(spectator.games_over + 1, games)
                    live.update(spectator.render(f"salvo demo - game {game_no}/{games}"))
                    # Each game's results once all its stats arrived (before the reset clears them).
                    if printed < spectator.games_over and spectator.complete():
                        printed += 1
                        live.console.print(spectator.results_table())
                    elif not any(t.is_alive() for t in threads) and time.monotonic() - spectator.last_message > QUIET_S:
                        break
                    time.sleep(0.05)
            console.print()
        finally:
            for client in clients:
                client.close()
            watch.loop_stop()
            watch.disconnect()
            referee.stop()
            if embedded:
                embedded.stop()
    winners = [r.winner for r in records[names[0]]] if names else []
    return DemoResult(winners, records)
