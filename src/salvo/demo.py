"""``salvo demo``: a whole game on one machine, nothing to set up.

An embedded MQTT broker (amqtt, in-process, on a free local port) unless a
broker URL is given, the real referee with short timeouts, and bots with
mixed strategies playing over MQTT, while the terminal shows every board as
the referee sees it (rich).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from salvo import crypto, wire
from salvo.bots import STRATEGIES, make_strategy
from salvo.bots.base import Strategy
from salvo.client import GameRecord, SalvoClient
from salvo.engine import Config
from salvo.mqtt import Broker, connect_async, new_client
from salvo.referee import Referee, make_arenas
from salvo.rules import BOARD_SIZE, FLEET, Placement, cell
from salvo.topics import Topics
from salvo.view import Shot, View, parse_names

NAMES = ("ada", "grace", "alan", "edsger", "barbara", "donald", "ken", "margaret")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """amqtt running on its own event loop in a background thread. It speaks
    MQTT 3.1.1 only, hence ``?protocol=3`` in :attr:`url`."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="amqtt", daemon=True)
        self._broker: Any = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}?protocol=3"

    def start(self) -> EmbeddedBroker:
        from amqtt.broker import Broker as AmqttBroker

        for noisy in ("amqtt", "transitions"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{self.port}"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        self._thread.start()

        async def start() -> Any:
            broker = AmqttBroker(config, loop=self._loop)
            await broker.start()
            return broker

        self._broker = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._broker is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._broker.shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@dataclass
class Board:
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
        self.boards: dict[str, Board] = {}
        self.state = "lobby"
        self.turn: wire.TurnInfo | None = None
        self.log: list[str] = []
        self.winner: str | None = None
        self.summary: wire.StatsSummary | None = None
        self.stats: dict[str, wire.PlayerStats] = {}
        self.players: list[str] = []
        self.games_over = 0
        self._lock = threading.Lock()
        self._players = topics.players_list.removesuffix("list")
        self._stats = topics.stats_summary.removesuffix("summary") + "players/"

    def board(self, name: str) -> Board:
        return self.boards.setdefault(name, Board(name, "?"))

    def feed(self, topic: str, payload: bytes) -> None:
        text = payload.decode("utf-8", "replace")
        with self._lock, contextlib.suppress(ValueError):
            self._feed(topic, text)

    def _feed(self, topic: str, text: str) -> None:
        t = self.t
        if topic == t.state and text:
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
        elif topic == t.turn and text:
            self.turn = wire.TurnInfo.model_validate_json(text)
        elif topic == t.players_list and text:
            self.players = parse_names(text)
        elif topic == t.salvo and text:
            s = wire.SalvoResult.model_validate_json(text)
            self.log.append(f"turn {s.turn}: {s.player} fired {s.shots}, {s.hits} hit{'s' * (s.hits != 1)}")
        elif topic == t.winner:
            self.winner = text or None
        elif topic == t.stats_summary and text:
            self.summary = wire.StatsSummary.model_validate_json(text)
        elif topic.startswith(self._stats) and text:
            self.stats[topic[len(self._stats) :]] = wire.PlayerStats.model_validate_json(text)
        elif topic.startswith(self._players):
            levels = topic[len(self._players) :].split("/")
            if len(levels) == 2 and levels[1] == "hit":
                hit = wire.Hit.model_validate_json(text)
                self.board(levels[0]).shots.add(cell(hit.x, hit.y))
            elif len(levels) == 2 and levels[1] == "defeated" and text == "true":
                self.board(levels[0]).defeated = True
                self.log.append(f"[bold red]{levels[0]} is defeated[/]")
            elif len(levels) == 4 and levels[3] == "sunk" and text == "true":
                self.board(levels[0]).sunk.append(levels[2])
                self.log.append(f"{levels[0]}'s {levels[2]} sank")

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

    def _board_panel(self, b: Board) -> Panel:
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

    def __init__(self, inner: Strategy, delay: float, board: Board) -> None:
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
    logging.getLogger("salvo").setLevel(logging.ERROR)
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
            stop_waiting = time.monotonic() + 5
            with Live(spectator.render("salvo demo"), console=console, refresh_per_second=8) as live:
                while any(t.is_alive() for t in threads) or printed < spectator.games_over:
                    game_no = min(spectator.games_over + 1, games)
                    live.update(spectator.render(f"salvo demo - game {game_no}/{games}"))
                    # Each game's results once all its stats arrived (before the reset clears them).
                    if printed < spectator.games_over and spectator.complete():
                        printed += 1
                        live.console.print(spectator.results_table())
                    elif not any(t.is_alive() for t in threads) and time.monotonic() > stop_waiting:
                        break
                    if any(t.is_alive() for t in threads):
                        stop_waiting = time.monotonic() + 5  # our subscription may lag the bots'
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
