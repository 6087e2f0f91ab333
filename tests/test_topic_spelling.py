"""One home for topic names: only ``salvo/spec/topics.py`` spells a topic.

Reads every module of src with ``ast`` and fails on a string constant (an
f-string's literal parts too) that looks like a topic or a topic filter:
no whitespace, made of MQTT levels, with a ``game``, ``players``,
``tournament`` or ``referee`` level or a ``+``/``#`` wildcard level.
Docstrings and prose (messages with spaces) may quote topics.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "salvo"
HOME = SRC / "spec" / "topics.py"
LEVEL = re.compile(r"[A-Za-z0-9_%+#-]*")
TOPIC_LEVELS = frozenset({"game", "players", "tournament", "referee", "+", "#"})


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
    """``line: 'text'`` of every topic-like constant in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree)
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and looks_like_topic(node.value)
    ]


def test_the_detector_knows_a_topic_from_prose() -> None:
    topics = ("/game/state", "game/salvo", "/players/", "/+", "/#", "players/+", "/tournament/x", "/+/game/turn")
    for topic in topics:
        assert looks_like_topic(topic), topic
    for other in ("#", "+/=_-", "no /game/state from the referee", "mqtt://localhost:1883", "web/data/*", "a/b"):
        assert not looks_like_topic(other), other


def test_the_detector_reads_f_strings_and_skips_docstrings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""/game/state"""\ndef f(p):\n    """/players/list"""\n    return f"/{p}/game/record"\n')
    assert [hit.rsplit(": ", 1)[1] for hit in spelled_topics(module)] == ["'/game/record'"]


def test_only_topics_py_spells_topics() -> None:
    assert spelled_topics(HOME), "the detector finds nothing even in topics.py: it is broken"
    found = [
        f"{path.relative_to(SRC.parent)}:{hit}"
        for path in sorted(SRC.rglob("*.py"))
        if path != HOME
        for hit in spelled_topics(path)
    ]
    assert not found, "topic strings outside salvo/spec/topics.py (add a builder there):\n" + "\n".join(found)
