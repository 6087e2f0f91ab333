"""docker-compose.yml, the Dockerfile, .dockerignore and .env.example, read
without a Docker engine: what a mistake in them would break, caught in a
second instead of in the engine's run (tests/test_compose_night.py, which
runs the compose night itself, pytest -m docker).

- The compose file is validated with the Compose Specification's own JSON
  schema (tests/compose-spec.json, from
  https://github.com/compose-spec/compose-spec, schema/compose-spec.json,
  Apache License 2.0; its ``$comment`` names the commit), after compose's
  variable interpolation with the values of .env.example.
- Every salvo service's command and environment are parsed by the real
  ``salvo`` CLI (click), and every SALVO_* variable a service sets must be an
  option's environment variable of what it runs.
- The broker's healthcheck runs against a real mosquitto.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema  # type: ignore[import-untyped]  # types-jsonschema is no test dependency
import paho.mqtt.client as mqtt
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML has no inline types; types-PyYAML is no test dependency
from click.core import ParameterSource
from paho.mqtt.enums import CallbackAPIVersion

from salvo.cli import main
from salvo.net.watch import wait_until
from salvo.organiser.teams import render_acl
from salvo.tools.localbroker import free_port

from conftest import BrokerFactory
from mosquitto import ROOT

RAW: str = (ROOT / "docker-compose.yml").read_text()
COMPOSE_RAW: dict[str, Any] = yaml.safe_load(RAW)
#: The uid:gid mosquitto drops to in the eclipse-mosquitto image (its Dockerfile:
#: adduser -u 1883 ... mosquitto), which the salvo image runs as too.
MOSQUITTO_UID = "1883:1883"
#: What .env.example leaves for the organiser to fill in.
FILLED = {
    "SALVO_PASSWORD": "referee-pw",
    "SALVO_CONSOLE_PASSWORD": "console-pw",
    "BOT_PASSWORD": "house-pw",
    "BOT_SECRET": "house-secret",
}
SALVO_SERVICES = ("referee", "spectate", "bots", "salvo")

# -- compose's variable interpolation ----------------------------------------------------

_VAR = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|(?P<bare>\w+))")


def _expand(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation: $$, $NAME, ${NAME}, ${NAME:-default},
    ${NAME-default}, ${NAME:?error}, ${NAME?error} (KeyError: compose refuses)."""

    def one(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name, op, arg = m["name"] or m["bare"], m["op"] or "", m["arg"] or ""
        value = env.get(name)
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("?") and unset:
            raise KeyError(f"{name}: {arg}")
        if op.endswith("-") and unset:
            return arg
        return value or ""

    return _VAR.sub(one, text)


def _interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _expand(node, env)
    if isinstance(node, list):
        return [_interpolate(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _interpolate(v, env) for k, v in node.items()}
    return node


def _env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    return {k.strip(): v for k, v in pairs}


def _dot_env() -> dict[str, str]:
    """.env as the organiser writes it from .env.example."""
    return {**_env_example(), **FILLED}


COMPOSE: dict[str, Any] = _interpolate(COMPOSE_RAW, _dot_env())


# -- the file as compose reads it ---------------------------------------------------------


def test_the_compose_file_validates_against_the_compose_spec() -> None:
    schema = json.loads((Path(__file__).parent / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(COMPOSE)]
    assert not errors, errors
    # ... and the schema does reject a broken file (it is no empty schema)
    broken = {**COMPOSE, "services": {"referee": {**COMPOSE["services"]["referee"], "depends_on": 3}}}
    assert not validator.is_valid(broken)


def test_every_variable_is_in_env_example_with_its_default_and_none_is_required() -> None:
    example = _env_example()
    used = {m["name"] or m["bare"]: m["op"] or "" for m in _VAR.finditer(RAW) if not m["escaped"]}
    assert used, "no variables found"
    assert set(used) == set(example), "docker-compose.yml and .env.example name different variables"
    # nothing is required: `docker compose build` (and run, config) works on a fresh clone
    assert all(op == ":-" for op in used.values()), used
    # .env.example shows the defaults: copying it changes nothing
    defaults = {m["name"]: m["arg"] or "" for m in _VAR.finditer(RAW) if m["op"] == ":-"}
    for name, default in defaults.items():
        assert example[name] == default, f"{name}: .env.example says {example[name]!r}, the compose file {default!r}"
    assert not example["SALVO_PASSWORD"] and not example["SALVO_CONSOLE_PASSWORD"]  # no password in the repository


def test_broker_service_matches_mosquitto_conf() -> None:
    conf = (ROOT / "mosquitto.conf").read_text()
    broker = COMPOSE["services"]["mosquitto"]
    # an exact release, not a floating tag ("2" now means 2.1)
    assert re.fullmatch(r"eclipse-mosquitto:2\.0\.\d+", broker["image"])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    # what the broker reads, a directory (salvo replaces its files atomically), and nothing else of data/
    assert mounts["/data/broker"] == "./data/broker" and broker["volumes"][1].endswith(":ro")
    assert not any(source == "./data" for source in mounts.values())
    for key in ("password_file", "acl_file", "certfile", "keyfile"):
        paths = re.findall(rf"^{key} (\S+)$", conf, re.MULTILINE)
        assert paths and all(p.startswith("/data/broker/") for p in paths), f"{key} is not in the broker's directory"
    assert not re.search(r"^cafile ", conf, re.MULTILINE)  # no CA in the broker's directory
    assert mounts["/mosquitto/config/mosquitto.conf"] == "./mosquitto.conf"
    assert re.search(r"^persistence_location /mosquitto/data/$", conf, re.MULTILINE)
    assert mounts["/mosquitto/data"] == "mosquitto-data" and "mosquitto-data" in COMPOSE["volumes"]
    assert broker["tmpfs"] == ["/mosquitto/log"]  # the image's other VOLUME: no anonymous volume per container
    # teams reach TLS only; plain MQTT is published on the host's loopback only; no websockets
    assert set(broker["ports"]) == {"8883:8883", "8884:8884", "127.0.0.1:1883:1883"}
    assert "websockets" not in conf
    # the one line the service rewrites exists, as the command's sed expects it
    sed = re.search(r"sed 's/(.*?)/(.*?)/'", broker["command"][2])
    assert sed and re.search(sed.group(1), conf, re.MULTILINE)


def test_bind_mounts_put_data_where_the_guide_says() -> None:
    for name in SALVO_SERVICES:
        svc = COMPOSE["services"][name]
        assert svc["volumes"] == ["./data:/srv/salvo/data"], name  # the image's working directory's data/
        assert svc["init"] is True, name  # salvo is never PID 1 (which ignores an early SIGTERM)
        paths = [str(v) for v in svc.get("environment", {}).values() if str(v).startswith("data/")]
        assert all(not p.startswith("/") for p in paths)


def test_services_wiring_modes_healthchecks_restarts() -> None:
    services = COMPOSE["services"]
    for name in SALVO_SERVICES:
        svc = services[name]
        assert svc["image"] == "salvo:local" and ("build" in svc) == (name == "referee"), name  # built once
        if name != "salvo":
            assert svc["environment"]["SALVO_BROKER"] == "mqtt://mosquitto:1883"
            assert svc["depends_on"] == {"mosquitto": {"condition": "service_healthy"}}, name
    # one referee, whatever the mode: up -d brings back the evening, down stops it all
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"mosquitto", "referee", "spectate", "bots"}
    assert services["salvo"]["profiles"] == ["tools"] and services["salvo"]["restart"] == "no"
    assert services["referee"]["command"] == ["night", "run"]
    assert services["referee"]["environment"]["SALVO_MODE"] == "free-play"
    assert services["bots"]["environment"]["SALVO_MODE"] == "free-play"  # the house bot follows the mode
    assert services["bots"]["scale"] == "0"  # a house bot only when .env asks
    # after a crash or an engine restart again; never a loop on a refusal (salvo night run exits 0 then)
    assert services["referee"]["restart"] == "on-failure"
    assert services["referee"]["healthcheck"]["test"] == ["CMD", "salvo", "night", "health"]
    for name in ("mosquitto", "spectate", "bots"):
        assert services[name]["restart"] == "unless-stopped", name
    # the console faces the host (TLS with the broker's certificate, password)
    env = services["referee"]["environment"]
    assert env["SALVO_CONSOLE"] == "0.0.0.0:8470" and "8470:8470" in services["referee"]["ports"]
    assert (env["SALVO_CONSOLE_CERT"], env["SALVO_CONSOLE_KEY"]) == ("data/broker/server.crt", "data/broker/server.key")
    # another night: other state files, by name in .env
    other = _interpolate(COMPOSE_RAW, {**FILLED, "SALVO_TOURNAMENT_STATE": "swiss.json"})
    assert other["services"]["referee"]["environment"]["SALVO_TOURNAMENT_STATE"] == "data/swiss.json"
    # no password on a command line (ps shows those)
    for svc in services.values():
        assert not any("pw" in a or "secret" in a for a in svc["command"]), svc["command"]


def test_the_dockerfile_drops_to_1883_without_anonymous_volumes() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line and not line[0].isspace()]
    keywords = [i[0] for i in instructions if not i[0].startswith("#")]
    assert "VOLUME" not in keywords
    assert "--uid 1883 --gid 1883" in dockerfile
    assert 'ENTRYPOINT ["salvo-entrypoint"]' in dockerfile and "WORKDIR /srv/salvo" in dockerfile
    entrypoint = (ROOT / "docker" / "entrypoint.sh").read_text()
    # root only to give data/ to 1883, then salvo as 1883 with no supplementary group
    assert "chown -h 1883:1883" in entrypoint
    assert "exec setpriv --reuid=1883 --regid=1883 --clear-groups -- salvo" in entrypoint


def _dockerignored(path: str, rules: list[str]) -> bool:
    """Docker's .dockerignore: the last rule matching the path or one of
    its parents decides; ``!`` lets back in; ``**`` spans directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.lstrip("!").strip("/")
        regex = "".join(
            ".*" if tok == "**" else "[^/]*" if tok == "*" else "[^/]" if tok == "?" else re.escape(tok)
            for tok in re.findall(r"\*\*|\*|\?|[^*?]+", pattern)
        )
        if any(re.fullmatch(regex, p) for p in prefixes):
            ignored = not negate
    return ignored


def test_the_build_context_holds_the_sources_and_no_secrets() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for kept in (
        "pyproject.toml",
        "README.md",
        "src/salvo/__init__.py",
        "src/salvo/web/data/spectate.html",
        "docker/entrypoint.sh",
    ):
        assert not _dockerignored(kept, rules), kept
    for left_out in (
        ".venv/bin/python",
        ".git/HEAD",
        "data/broker/passwd",
        "data/broker/server.key",
        "cards/ada.txt",
        ".env",
        "salvo-referee.key",
        "salvo-referee.db",
        "tests/test_compose.py",
        "src/salvo/__pycache__/cli.cpython-311.pyc",
        "src/salvo/x.db",
    ):
        assert _dockerignored(left_out, rules), left_out
    # everything the Dockerfile copies is in the context
    copies = re.findall(r"^COPY (.+) \S+$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    for source in (s for line in copies for s in line.split()):
        assert (ROOT / source).exists() and not _dockerignored(source, rules), source


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_git_ignores_secrets_and_state() -> None:
    paths = [
        ".env",
        "data/broker/passwd",
        "data/tls/ca.key",
        "cards/ada.txt",
        "salvo-referee.db",
        "x/salvo-tournament-referee.db",
    ]
    out = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.stdout.split() == paths
    # ... but not the package's own data directory
    kept = subprocess.run(["git", "check-ignore", "-q", "src/salvo/web/data/new.html"], cwd=ROOT, check=False)
    assert kept.returncode == 1


# -- the commands, parsed by the real CLI ---------------------------------------------------


def _resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    """The salvo (sub)command ``args`` name, and its own arguments."""
    command: click.Command = main
    rest = list(args)
    while isinstance(command, click.Group):
        name, *rest = rest
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, f"salvo has no command {name!r} (args {args})"
        command = sub
    return command, rest


def _envvars(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        envvar = param.envvar
        names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return names


def _in_container(value: str, data: Path) -> str:
    """A container path on this machine: /data is ``data``."""
    return re.sub(r"(?<![\w:])/data(?=/|$)", str(data), value)


def _every_command(group: click.Group = main) -> Iterator[click.Command]:
    for name in group.list_commands(click.Context(group)):
        sub = group.get_command(click.Context(group), name)
        if isinstance(sub, click.Group):
            yield from _every_command(sub)
        elif sub is not None:
            yield sub


#: What `salvo night run` runs, by SALVO_MODE: it hands them the environment.
_NIGHT = {"free-play": ["referee"], "tournament": ["tournament", "run"]}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SALVO_* variable of the calling environment leaks into a parse."""
    for name in [k for k in os.environ if k.startswith("SALVO_")]:
        monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("service", "extra"),
    [
        ("referee", {}),
        ("referee", {"SALVO_MODE": "tournament"}),
        (
            "referee",
            {"SALVO_MODE": "tournament", "SALVO_FORMAT": "swiss", "SALVO_ROUNDS": "5", "SALVO_TABLE_SIZE": "3"},
        ),
        ("spectate", {}),
        ("bots", {}),
        ("bots", {"SALVO_MODE": "tournament"}),
    ],
)
def test_the_service_command_parses_with_the_salvo_cli(
    service: str, extra: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # (the options' callbacks may make what a path names, e.g. the console's
    # certificate under data/: relative to a scratch directory, not the checkout)
    monkeypatch.chdir(tmp_path)
    svc = _interpolate(COMPOSE_RAW, {**_dot_env(), **extra})["services"][service]
    env = {k: str(v) for k, v in svc["environment"].items()}
    command, args = _resolve(svc["command"])
    readers = [command]
    if svc["command"] == ["night", "run"]:  # one environment for either mode
        readers += [_resolve(run)[0] for run in _NIGHT.values()]
        command = _resolve(_NIGHT[env["SALVO_MODE"]])[0]
        args = ["--keep-serving"] if env["SALVO_MODE"] == "tournament" else []
    # every setting the compose file passes reaches an option of what it runs
    unread = sorted(set(env) - set().union(*map(_envvars, readers)))
    assert not unread, f"salvo {' '.join(svc['command'])} reads no {unread}"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ctx = command.make_context(svc["command"][0], args)
    for param in command.params:
        envvar = param.envvar if isinstance(param.envvar, str) else None
        if envvar in env and env[envvar] and param.name:
            assert ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT, envvar
    for value in ctx.params.values():  # state, keys, registry: in data/, relative to the working directory
        if isinstance(value, Path) and value.name != "-":
            assert value.parts[0] == "data", value


def test_every_tool_setting_is_some_commands() -> None:
    """The organiser's `docker compose run --rm salvo ...`: each variable it
    sets is an option's of some salvo command (no setting that does nothing)."""
    env = COMPOSE["services"]["salvo"]["environment"]
    read = set().union(*map(_envvars, _every_command()))
    assert not sorted(set(env) - read)


# -- healthchecks -------------------------------------------------------------------------


def _healthcheck(service: str, env: dict[str, str], replace: tuple[str, str] = ("", "")) -> int:
    """Run the service's healthcheck (["CMD", "python", "-c", CODE]) here."""
    test = COMPOSE["services"][service]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    code = test[3].replace(*replace) if replace[0] else test[3]
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, check=False
    ).returncode


def test_the_broker_healthcheck_subscribes_where_anonymous_clients_may(new_broker: BrokerFactory) -> None:
    test = COMPOSE["services"]["mosquitto"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "mosquitto_sub"] and "-E" in test and "-W" in test
    topic = test[test.index("-t") + 1]
    assert test[test.index("-p") + 1] == "1883" and test[test.index("-h") + 1] == "127.0.0.1"
    anonymous = render_acl(["ada"]).split("\nuser ")[0]  # topic lines before the first user: anonymous rights
    assert f"\ntopic read {topic}\n" in anonymous
    # against a real mosquitto with the project's configuration and ACL
    mosq = new_broker()
    mosq.start()
    if shutil.which("mosquitto_sub"):
        args = [a.replace("1883", str(mosq.port)) if a == "1883" else a for a in test[1:]]
        assert subprocess.run(args, capture_output=True, timeout=15, check=False).returncode == 0
    granted: list[bool] = []
    client = mqtt.Client(CallbackAPIVersion.VERSION2)
    client.on_connect = lambda c, *_: c.subscribe(topic)
    client.on_subscribe = lambda _c, _u, _mid, codes, _p: granted.extend(not rc.is_failure for rc in codes)
    client.connect("127.0.0.1", mosq.port)
    client.loop_start()
    try:
        wait_until(lambda: bool(granted), what="the SUBACK")
    finally:
        client.disconnect()
        client.loop_stop()
    assert granted == [True]


# -- the commands, run natively -----------------------------------------------------------


def test_the_spectate_container_command_serves_the_page() -> None:
    svc = COMPOSE["services"]["spectate"]
    args = list(svc["command"])
    assert args[0] == "spectate" and args[args.index("--host") + 1] == "0.0.0.0"
    port = args[args.index("--port") + 1]
    assert f"{port}:{port}" in svc["ports"]
    # The page never speaks MQTT: the spectate server reads the broker over
    # the compose network and streams to browsers (server-sent events).
    assert svc["environment"]["SALVO_BROKER"] == "mqtt://mosquitto:1883"
    free = str(free_port())
    args[args.index("--port") + 1] = free
    assert _healthcheck("spectate", {}, (f":{port}/", f":{free}/")) != 0  # nothing listens yet
    proc = subprocess.Popen([sys.executable, "-m", "salvo", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    body: list[bytes] = []

    def served() -> bool:
        try:
            body.append(urllib.request.urlopen(f"http://127.0.0.1:{free}/", timeout=2).read())
        except OSError:
            return False  # not listening yet
        return True

    try:
        wait_until(served, what="the page served")
        assert b"<title>salvo" in body[0] and b'<script src="spectate.js">' in body[0]
        script = urllib.request.urlopen(f"http://127.0.0.1:{free}/spectate.js", timeout=2).read()
        assert b"new EventSource(" in script  # the page reads the server's event stream, never MQTT
        assert _healthcheck("spectate", {}, (f":{port}/", f":{free}/")) == 0
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode()
    assert proc.returncode == 0, out
