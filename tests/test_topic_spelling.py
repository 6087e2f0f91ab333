"""One home for topic names: only ``salvo/spec/topics.py`` spells a topic.

Reads every module of src with ``ast`` and fails on a string constant (an
f-string's literal parts too) that looks like a topic, a piece of one or a
topic filter: no whitespace, made of MQTT levels, one of them a level of a
topic topics.py builds (``game``, ``players``, ``hit``, ``sunk``...) or a
``+``/``#`` wildcard. Docstrings and prose (messages with spaces) may
quote topics.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from salvo.spec.topics import Outbound, Topics, TournamentTopics

SRC = Path(__file__).resolve().parent.parent / "src" / "salvo"
HOME = SRC / "spec" / "topics.py"
LEVEL = re.compile(r"[A-Za-z0-9_%+#-]*")


def _topic_levels() -> frozenset[str]:
    """Every fixed level of every topic topics.py builds, and the wildcards."""
    t = Topics("p")
    built = [getattr(t, kind.value) for kind in Outbound if isinstance(getattr(t, kind.value), str)]
    built += [t.player_error("n"), t.hit("n"), t.fire("n"), t.defeated("n"), t.stats_player("n")]
    built += [t.approved("n", "s"), t.sunk("n", "s"), t.ship_error("n", "s"), t.place("n", "s")]
    built += [t.request_participation, t.probe, t.tool_marker("chaos")]
    built += [*TournamentTopics.public_filters(), TournamentTopics.marker]
    return frozenset(level for topic in built for level in topic.split("/")) - {"p", "n", "s", ""} | {"+", "#"}


TOPIC_LEVELS = _topic_levels()
#: Not topics though they read like one: (module, text, why)
NOT_TOPICS = {("web/spectate.py", "/record")}  # the web server's route for a game record


def looks_like_topic(text: str) -> bool:
    if "/" not in text or any(c.isspace() for c in text):
        return False
    levels = text.split("/")
    return all(LEVEL.fullmatch(level) for level in levels) and not TOPIC_LEVELS.isdisjoint(levels)


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spelled_topics(path: Path) -> list[str]:
    """``line: 'text'`` of every topic-like string in ``path``. An f-string
    is read whole, each placeholder as one level (``x``): ``f"/{p}/#"`` is a
    filter, ``f"reached /players/{n}/hit"`` prose."""
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    texts: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            text = "".join(str(p.value) if isinstance(p, ast.Constant) else "x" for p in node.values)
            texts.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            texts.append((node.lineno, node.value))
    return [f"{line}: {text!r}" for line, text in texts if looks_like_topic(text)]


def test_the_levels_come_from_topics_py() -> None:
    assert {"game", "players", "hit", "sunk", "fire", "request_participation", "tournament", "+", "#"} <= TOPIC_LEVELS
    assert not {"p", "n", "s", ""} & TOPIC_LEVELS


def test_the_detector_knows_a_topic_from_prose() -> None:
    topics = ("/game/state", "game/salvo", "/players/", "/+", "/#", "players/+", "/tournament/x", "/+/game/turn")
    for topic in topics:
        assert looks_like_topic(topic), topic
    for other in (
        "#",
        "+/=_-",
        "/proc/",
        "/health",
        "no /game/state from the referee",
        "mqtt://localhost:1883",
        "web/data/*",
        "a/b",
    ):
        assert not looks_like_topic(other), other


def test_the_detector_reads_f_strings_and_skips_docstrings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""/game/state"""\ndef f(p, n):\n    """/players/list"""\n'
        '    return f"/{p}/game/record", f"{n} reached /players/{n}/hit", "/#"\n'
    )
    assert [hit.split(": ", 1)[1] for hit in spelled_topics(module)] == ["'/x/game/record'", "'/#'"]


def test_only_topics_py_spells_topics() -> None:
    assert spelled_topics(HOME), "the detector finds nothing even in topics.py: it is broken"
    found = [
        f"{path.relative_to(SRC.parent)}:{hit}"
        for path in sorted(SRC.rglob("*.py"))
        if path != HOME
        for hit in spelled_topics(path)
        if (path.relative_to(SRC).as_posix(), hit.split(": ", 1)[1].strip("'")) not in NOT_TOPICS
    ]
    assert not found, "topic strings outside salvo/spec/topics.py (add a builder there):\n" + "\n".join(found)
