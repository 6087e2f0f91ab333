"""The team's install, salvo-sdk (sdk/pyproject.toml): the SDK without the
referee, the web server, the embedded broker or the organiser's tools.

The fast tests check that the modules its wheel carries import nothing
else (lazy and type-checking imports included) but its declared
dependencies and the standard library, and that the import contract and
the version say the same; the long ones build and install it, and the full
package, into fresh venvs and look at what came (README.md's SDK section
has the figures).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from salvo.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
SDK = ROOT / "sdk"
#: What a team does not need, and the slim install must not pull.
SERVERS = ("starlette", "uvicorn", "h11", "amqtt", "rich", "argon2-cffi", "cryptography")


def sdk_project() -> dict[str, Any]:
    with (SDK / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def sdk_modules() -> set[str]:
    """Every module the salvo-sdk wheel carries, from its force-include list."""
    included: dict[str, str] = sdk_project()["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    modules: set[str] = set()
    for source, target in included.items():
        path = (SDK / source).resolve()
        assert path.exists(), source
        assert target == path.relative_to(ROOT / "src").as_posix(), (source, target)
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
        for file in files:
            parts = file.relative_to(ROOT / "src").with_suffix("").parts
            modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def sdk_dependencies() -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in sdk_project()["project"]["dependencies"]}


def test_the_sdk_imports_only_what_it_carries_and_its_dependencies() -> None:
    carried = sdk_modules()
    assert {"salvo.client", "salvo.sdk.client", "salvo.cli.bot", "salvo.spec.crypto"} <= carried
    graph = grimp.build_graph("salvo", include_external_packages=True, cache_dir=None)
    distributions = importlib.metadata.packages_distributions()
    allowed = sdk_dependencies()
    wrong: list[str] = []
    for module in sorted(carried):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            top = imported.split(".")[0]
            if top == "salvo":
                ok = imported in carried
            elif top in sys.stdlib_module_names or top == "__future__":
                ok = True
            else:
                ok = bool({canonicalize_name(d) for d in distributions.get(top, [])} & allowed)
            if not ok:
                wrong.append(f"{module} imports {imported}")
    assert not wrong, "salvo-sdk's modules import what it does not carry (sdk/pyproject.toml):\n" + "\n".join(wrong)


def test_the_import_contract_names_the_sdk_modules() -> None:
    """pyproject's sdk-slim contract (lint-imports) covers exactly the wheel's modules."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (contract,) = (c for c in contracts if c["id"] == "sdk-slim")
    sources: list[str] = contract["source_modules"]
    carried = sdk_modules()
    assert set(sources) <= carried
    assert {m for m in carried if not any(m == s or m.startswith(f"{s}.") for s in sources)} <= {
        "salvo",
        "salvo.__main__",
        "salvo.cli",
    }
    forbidden = set(contract["forbidden_modules"])
    assert {m.removesuffix("-cffi") for m in SERVERS} <= forbidden


def test_the_sdk_has_the_packages_version() -> None:
    version = sdk_project()["tool"]["hatch"]["version"]
    text = (SDK / version["path"]).read_text()
    found = re.findall(version["pattern"], text)
    with (ROOT / "pyproject.toml").open("rb") as f:
        assert found == [tomllib.load(f)["project"]["version"]]


def test_the_full_command_has_every_command() -> None:
    """The full package leaves no command module out (the team's install does)."""
    assert set(main.commands) == {name for names in COMMANDS.values() for name in names}


# -- the installs -----------------------------------------------------------------------------


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """A copy of what the two builds read (pip builds in the source tree: not in the checkout)."""
    tree = tmp_path / "salvo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    for name in ("src", "sdk"):
        shutil.copytree(ROOT / name, tree / name, ignore=ignore)
    return tree


def install(tmp_path: Path, what: Path) -> tuple[Path, set[str]]:
    """A fresh venv with ``pip install WHAT``: its python and the distributions
    the install pulled (not the venv's own, pip)."""
    venv = tmp_path / f"venv-{what.name}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    empty = distributions(python)
    subprocess.run([python, "-m", "pip", "install", "-q", str(what)], check=True, cwd=what)
    return python, distributions(python) - empty


def distributions(python: Path) -> set[str]:
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], check=True, capture_output=True, text=True
    ).stdout
    return {canonicalize_name(d["name"]) for d in json.loads(listed)}


def readme_pulls(install: str) -> tuple[int, set[str]]:
    """What README.md's SDK table says ``pip install <install>`` pulls: the
    count and the names. The full row starts from the SDK's ("those 11
    (salvo for salvo-sdk), ..."); a package's own dependencies follow it in
    parentheses."""
    readme = (ROOT / "README.md").read_text()
    row = re.search(rf"^\| `pip install {re.escape(install)}` [^|]*\| (\d+): ([^|]+?) \|", readme, re.M)
    assert row, f"README.md has no row for pip install {install}"
    count, listed = int(row[1]), row[2]
    names: set[str] = set()
    if those := re.match(r"those (\d+) \((\S+) for (\S+)\), ", listed):
        base_count, base = readme_pulls("./sdk")
        assert int(those[1]) == base_count
        names = (base - {those[3]}) | {those[2]}
        listed = listed[those.end() :]
    names |= {canonicalize_name(n.strip()) for n in re.split(r"[,()]", listed) if n.strip()}
    return count, names


def run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, *args], check=False, capture_output=True, text=True, timeout=60)


TEAM_CODE = """
import sys
import salvo.client, salvo.rules, salvo.view, salvo.strategy, salvo.errors, salvo.wire, salvo.bots
from salvo.client import SalvoClient
from salvo.bots import make_strategy

client = SalvoClient("ada", "ada's secret", "mqtt://127.0.0.1:1883", prefix="arena1")
make_strategy("density", 1).place_fleet()
client.close()
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"starlette", "uvicorn", "h11", "amqtt", "rich", "argon2"})
print("heavy:", heavy)
try:
    import salvo.conformance
except ModuleNotFoundError as exc:
    print("conformance:", exc.name)
"""


@pytest.mark.long
def test_the_sdk_installs_alone_without_servers_broker_or_organiser(tmp_path: Path, sources: Path) -> None:
    python, installed = install(tmp_path, sources / "sdk")
    assert "salvo-sdk" in installed and "salvo" not in installed
    count, named = readme_pulls("./sdk")  # README.md: the figures a team reads
    assert (len(installed), installed) == (count, named)
    assert {"paho-mqtt", "pydantic", "pynacl", "click"} <= installed
    assert not installed & {canonicalize_name(s) for s in SERVERS}, installed
    team = run(python, "-c", TEAM_CODE)
    assert team.returncode == 0, team.stderr
    assert "heavy: []" in team.stdout and "conformance: salvo.conformance" in team.stdout, team.stdout
    # The team's commands: `salvo bot` (the team card's line) and `salvo spec`; the rest says where it is.
    salvo = python.parent / "salvo"
    helped = subprocess.run([salvo, "--help"], capture_output=True, text=True, check=True).stdout
    assert re.findall(r"^  (\w+) ", helped.split("Commands:")[1], re.M) == ["bot", "spec"]
    bot = subprocess.run([salvo, "bot", "--help"], check=False, capture_output=True, text=True)
    assert bot.returncode == 0 and "--tournament" in bot.stdout
    refused = subprocess.run([salvo, "referee"], check=False, capture_output=True, text=True)
    assert refused.returncode == 2 and "full package" in refused.stderr
    version = subprocess.run([salvo, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == f"salvo, version {importlib.metadata.version('salvo')}"
    # The wheel carries the source list and nothing more (no bytecode, no tests).
    record = next((python.parent.parent / "lib").glob("python3*/site-packages/salvo_sdk-*.dist-info/RECORD"))
    files = {line.split(",")[0] for line in record.read_text().splitlines()}
    carried = {f for f in files if f.startswith("salvo/") and f.endswith(".py")}
    expected = {
        m.replace(".", "/") + ("/__init__.py" if (ROOT / "src" / m.replace(".", "/")).is_dir() else ".py")
        for m in sdk_modules()
    }
    assert carried == expected
    assert not [f for f in files if f.endswith(".pyc") and "__pycache__" not in f]


@pytest.mark.long
def test_the_full_package_still_installs_everything(tmp_path: Path, sources: Path) -> None:
    python, installed = install(tmp_path, sources)
    assert "salvo" in installed and "salvo-sdk" not in installed
    count, named = readme_pulls(".")  # README.md: "33: those 11 ..."
    assert (len(installed), installed) == (count, named)
    assert {canonicalize_name(s) for s in SERVERS if s != "cryptography"} <= installed  # cryptography: [organiser]
    salvo = python.parent / "salvo"
    helped = subprocess.run([salvo, "--help"], capture_output=True, text=True, check=True).stdout
    assert set(re.findall(r"^  (\w+) ", helped.split("Commands:")[1], re.M)) == set(main.commands)
    imported = run(
        python, "-c", "import salvo.tools.demo, salvo.web.webserver, salvo.referee.service, salvo.conformance"
    )
    assert imported.returncode == 0, imported.stderr
