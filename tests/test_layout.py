"""CONTRIBUTING.md's layer table says what pyproject.toml's layers contract
enforces and what the folders hold, so the three cannot drift apart; the
public paths teams use name the real homes' objects."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "salvo"
PUBLIC = ("client", "rules", "bots", "view", "strategy", "errors", "wire", "conformance")


def contract(contract_id: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found: dict[str, Any] = next(c for c in config["contracts"] if c.get("id") == contract_id)
    return found


def table() -> list[tuple[list[str], list[list[str]]]]:
    """(the layer's siblings, each sibling's modules) per row, top to bottom."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("<!-- layers:", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in block.splitlines()[3:]:
        layer, modules, _what = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        names = re.findall(r"`([\w/]+)`", layer)
        rows.append((names, [re.findall(r"`([\w/]+)`", part) for part in modules.split(r"\|")]))
    return rows


def test_contributing_lists_the_contracts_layers_in_order() -> None:
    layers = [re.split(r"\s*[|:]\s*", layer.strip()) for layer in contract("layers")["layers"]]
    assert [names for names, _ in table()] == layers
    # independent siblings are written '|' in both
    for layer, (names, _) in zip(contract("layers")["layers"], table(), strict=True):
        assert ":" not in layer or len(names) == 1, layer


def test_the_contract_is_exhaustive() -> None:
    assert contract("layers")["exhaustive"] is True
    assert contract("layers")["containers"] == ["salvo"]


def children(package: Path) -> set[str]:
    """A package's modules and subpackages (``name/`` for folders)."""
    out = set()
    for path in package.iterdir():
        if path.name.startswith(("_", ".")):
            continue
        if path.is_dir():
            out.add(path.name + "/")
        elif path.suffix == ".py":
            out.add(path.stem)
    return out


def test_every_module_is_in_contributings_table_under_its_layer() -> None:
    for names, modules in table():
        if names == list(PUBLIC):  # the facades: modules of salvo itself
            assert all((PACKAGE / f"{n}.py").exists() or (PACKAGE / n).is_dir() for n in names)
            continue
        assert len(modules) == len(names), names
        for name, listed in zip(names, modules, strict=True):
            folder = PACKAGE / name
            if listed == [f"{name}/"] and folder.is_dir():  # a package listed as itself (cli)
                continue
            if not folder.is_dir():  # a single module (failures)
                assert listed == [name], (name, listed)
                continue
            assert set(listed) == children(folder), f"CONTRIBUTING.md's {name} row: {sorted(children(folder))}"


def test_every_child_of_salvo_is_a_layer() -> None:
    placed = {n for names, _ in table() for n in names} | set(contract("layers").get("exhaustive_ignores", []))
    found = {c.rstrip("/") for c in children(PACKAGE)} | {"__main__"}
    assert found == placed


@pytest.mark.parametrize("public", PUBLIC)
def test_public_paths_name_the_real_homes_objects(public: str) -> None:
    facade = importlib.import_module(f"salvo.{public}")
    exported = facade.__all__
    assert exported, public
    for name in exported:
        obj = getattr(facade, name)
        home = getattr(obj, "__module__", None)
        if home is not None and isinstance(obj, type):
            # a class is the real home's object, never a copy defined in the facade
            assert home != facade.__name__, (public, name)
            assert getattr(importlib.import_module(home), name) is obj


MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    # CONTRIBUTING.md: a module over this is split along a seam, not let grow
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(sizes) > 100  # the walk found the package
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
