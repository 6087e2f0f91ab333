"""docker-compose.yml, the Dockerfile, .dockerignore and .env.example,
tested without a Docker engine.

- The compose file is validated with the Compose Specification's own JSON
  schema (tests/compose-spec.json, from
  https://github.com/compose-spec/compose-spec, schema/compose-spec.json,
  Apache License 2.0; its ``$comment`` names the commit), after compose's
  variable interpolation with the values of .env.example.
- Every salvo service's command and environment are parsed by the real
  ``salvo`` CLI (click), and every SALVO_* variable a service sets must be an
  option's environment variable of its command.
- The referee's and the projector page's commands run natively (the
  referee against a real mosquitto with the project's configuration and
  ACL), and so do their healthchecks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
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
from salvo.localbroker import free_port
from salvo.mqtt import Broker
from salvo.teams import add_team, render_acl
from salvo.watch import Recorder, wait_until

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
SALVO_SERVICES = ("referee", "spectate", "tournament", "bots")

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


def test_every_variable_is_in_env_example_required_or_defaulted() -> None:
    example = _env_example()
    used = {m["name"] or m["bare"]: m["op"] or "" for m in _VAR.finditer(RAW) if not m["escaped"]}
    assert used, "no variables found"
    assert set(used) == set(example), "docker-compose.yml and .env.example name different variables"
    required = {name for name, op in used.items() if op == ":?"}
    assert required == {"SALVO_PASSWORD", "SALVO_CONSOLE_PASSWORD"}
    assert all(op == ":-" for name, op in used.items() if name not in required)
    # .env.example shows the defaults: copying it changes nothing but the passwords
    defaults = {m["name"]: m["arg"] or "" for m in _VAR.finditer(RAW) if m["op"] == ":-"}
    for name, default in defaults.items():
        assert example[name] == default, f"{name}: .env.example says {example[name]!r}, the compose file {default!r}"
    assert all(not example[name] for name in required)  # no password in the repository
    for name in required:  # compose refuses to start without each
        with pytest.raises(KeyError, match=name):
            _interpolate(COMPOSE_RAW, {**FILLED, name: ""})


def test_broker_service_matches_mosquitto_conf() -> None:
    conf = (ROOT / "mosquitto.conf").read_text()
    broker = COMPOSE["services"]["mosquitto"]
    # an exact release, not a floating tag ("2" now means 2.1)
    assert re.fullmatch(r"eclipse-mosquitto:2\.0\.\d+", broker["image"])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    # passwd, ACL and certificates live in the data directory, mounted whole
    # (salvo replaces those files atomically: a single-file mount would keep the old one)
    assert mounts["/data"] == "./data"
    for key in ("password_file", "acl_file", "cafile", "certfile", "keyfile"):
        path = re.search(rf"^{key} (\S+)$", conf, re.MULTILINE)
        assert path and path.group(1).startswith("/data/"), f"{key} is not in the mounted data directory"
    assert mounts["/mosquitto/config/mosquitto.conf"] == "./mosquitto.conf"
    assert re.search(r"^persistence_location /mosquitto/data/$", conf, re.MULTILINE)
    assert mounts["/mosquitto/data"] == "mosquitto-data" and "mosquitto-data" in COMPOSE["volumes"]
    # teams reach TLS only; plain MQTT is published on the host's loopback only; no websockets
    assert set(broker["ports"]) == {"8883:8883", "127.0.0.1:1883:1883"}
    assert "websockets" not in conf
    # the one line the service rewrites exists, as the command's sed expects it
    sed = re.search(r"sed 's/(.*?)/(.*?)/'", broker["command"][2])
    assert sed and re.search(sed.group(1), conf, re.MULTILINE)


def test_bind_mounts_are_directories_and_paths_are_inside_them() -> None:
    for name, svc in COMPOSE["services"].items():
        binds = {v.split(":")[1]: v.split(":")[0] for v in svc.get("volumes", []) if v.startswith(".")}
        for target, source in binds.items():
            # the data directory whole; mosquitto.conf, which salvo never writes, is read once at start
            assert source == "./data" or (name, source) == ("mosquitto", "./mosquitto.conf"), (name, source)
            assert target == "/data" or source == "./mosquitto.conf"
        texts = [*svc["command"], *(str(v) for v in svc.get("environment", {}).values())]
        for path in (p for t in texts for p in re.findall(r"(?<![\w:])/data/\S*", t)):
            assert "/data" in binds, f"{name} uses {path} without mounting ./data"
    assert not any(v.get("volumes") for k, v in COMPOSE["services"].items() if k in ("spectate", "bots"))


def test_services_wiring_profiles_healthchecks_restarts() -> None:
    services = COMPOSE["services"]
    for name in SALVO_SERVICES:
        svc = services[name]
        assert svc["image"] == "salvo:local" and svc["build"] == "."  # built once, at home
        assert svc["environment"]["SALVO_BROKER"] == "mqtt://mosquitto:1883"
        # the broker only, once it answers: never the free-play referee (the
        # bots also play in a tournament, which must not start the referee)
        assert svc["depends_on"] == {"mosquitto": {"condition": "service_healthy"}}, name
    for name, svc in services.items():
        assert svc["restart"] in ("unless-stopped", "on-failure"), name
        if name != "bots":  # a bot has nobody depending on it, nothing to serve
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD" and len(test) > 1, name
    # a director that fails (no broker within 30 s) comes back; one that ended the night stays done
    assert services["tournament"]["restart"] == "on-failure"
    # `docker compose up` starts the broker, the free-play referee and the page;
    # the director and the bots only by their profiles: never both referees by default
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"mosquitto", "referee", "spectate"}
    assert services["tournament"]["profiles"] == ["tournament"] and services["bots"]["profiles"] == ["bots"]
    # the tournament console faces the host (TLS, password)
    tournament = services["tournament"]
    assert tournament["environment"]["SALVO_CONSOLE"] == "0.0.0.0:8470" and "8470:8470" in tournament["ports"]
    assert tournament["environment"]["SALVO_CONSOLE_CERT"] == "/data/tls/server.crt"
    assert tournament["environment"]["SALVO_CONSOLE_KEY"] == "/data/tls/server.key"
    # a swiss night after a round robin: other state files, by name in .env
    env = _interpolate(COMPOSE_RAW, {**FILLED, "SALVO_TOURNAMENT_STATE": "swiss.json"})
    assert env["services"]["tournament"]["environment"]["SALVO_TOURNAMENT_STATE"] == "/data/swiss.json"
    # no password on a command line (ps shows those)
    for svc in services.values():
        assert not any("pw" in a or "secret" in a for a in svc["command"]), svc["command"]


def test_the_dockerfile_runs_unprivileged_without_anonymous_volumes() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line and not line[0].isspace()]
    keywords = [i[0] for i in instructions if not i[0].startswith("#")]
    assert "VOLUME" not in keywords
    users = [i[1] for i in instructions if i[0] == "USER"]
    assert users == [MOSQUITTO_UID]  # the uid mosquitto reads data/ as: one owner for every file
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    assert 'ENTRYPOINT ["salvo"]' in dockerfile and "WORKDIR /data" in dockerfile
    assert "--uid 1883 --gid 1883" in dockerfile


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
    for kept in ("pyproject.toml", "README.md", "src/salvo/__init__.py", "src/salvo/data/spectate.html"):
        assert not _dockerignored(kept, rules), kept
    for left_out in (
        ".venv/bin/python",
        ".git/HEAD",
        "data/passwd",
        "data/tls/server.key",
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
    paths = [".env", "data/passwd", "data/tls/ca.key", "salvo-referee.db", "x/salvo-tournament-referee.db"]
    out = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.stdout.split() == paths
    # ... but not the package's own data directory
    kept = subprocess.run(["git", "check-ignore", "-q", "src/salvo/data/new.html"], cwd=ROOT, check=False)
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


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The organiser's data directory, as the commands expect to find it; no
    SALVO_* variable of the calling environment leaks into a parse."""
    for name in [k for k in os.environ if k.startswith("SALVO_")]:
        monkeypatch.delenv(name)
    data = tmp_path / "data"
    (data / "tls").mkdir(parents=True)
    for name in ("teams.json", "passwd", "tls/server.crt", "tls/server.key", "tls/ca.crt"):
        (data / name).touch()
    return data


@pytest.mark.parametrize(
    ("service", "extra"),
    [
        ("referee", {}),
        ("spectate", {}),
        ("tournament", {}),
        ("tournament", {"SALVO_FORMAT": "swiss", "SALVO_ROUNDS": "5", "SALVO_TABLE_SIZE": "3"}),
        ("bots", {}),
        ("bots", {"BOT_PLAY": "--tournament"}),
    ],
)
def test_the_service_command_parses_with_the_salvo_cli(
    service: str, extra: dict[str, str], data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = _interpolate(COMPOSE_RAW, {**_dot_env(), **extra})["services"][service]
    command, args = _resolve([_in_container(a, data) for a in svc["command"]])
    env = {k: _in_container(str(v), data) for k, v in svc["environment"].items()}
    # every setting the compose file passes reaches an option of the command
    unread = sorted(set(env) - _envvars(command))
    assert not unread, f"salvo {' '.join(svc['command'][:2])} reads no {unread}"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ctx = command.make_context(svc["command"][0], args)
    for param in command.params:
        envvar = param.envvar if isinstance(param.envvar, str) else None
        if envvar in env and env[envvar] and param.name:
            assert ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT, envvar
    for value in ctx.params.values():  # state, keys, registry: in the mounted directory
        if isinstance(value, Path):
            assert value.is_relative_to(data) or not value.is_absolute(), value


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


def test_the_referee_container_command_runs_natively(new_broker: BrokerFactory, tmp_path: Path) -> None:
    mosq = new_broker(users={"referee": "referee-pw"})
    data = tmp_path / "data"
    card = add_team(data / "teams.json", mosq.passwd, "ada")
    mosq.start()
    svc = COMPOSE["services"]["referee"]
    # The container's world, mapped onto this machine: /data and the broker's name.
    container_env = {k: _in_container(str(v), data) for k, v in svc["environment"].items()}
    container_env["SALVO_BROKER"] = container_env["SALVO_BROKER"].replace("mosquitto:1883", f"127.0.0.1:{mosq.port}")
    args = [_in_container(a, data) for a in svc["command"]]
    assert _healthcheck("referee", container_env) != 0  # no referee yet
    proc = subprocess.Popen(
        [sys.executable, "-m", "salvo", *args],
        cwd=data,  # the image's WORKDIR
        env={**os.environ, **container_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    watch = Recorder(Broker.from_url(mosq.url("referee")), ["/arena1/#", "/arena2/game/server"])
    try:
        watch.wait_for("/arena1/game/server", "up", timeout=30)
        watch.wait_for("/arena2/game/server", "up", timeout=10)
        assert _healthcheck("referee", container_env) == 0
        team = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials("ada", card.mqtt_password)
        from salvo.client import SalvoClient

        client = SalvoClient("ada", card.secret, team, prefix="arena1").connect()
        client.join()
        watch.wait_for("/arena1/players/list", '["ada"]')
        client.close()
        assert (data / "salvo-referee.db").exists() and (data / "salvo-referee.key").exists()
    finally:
        watch.close()
        proc.terminate()
        out = proc.communicate(timeout=15)[0].decode()
    assert proc.returncode == 0, out
    assert "admitting only the 1 teams" in out
    assert _healthcheck("referee", container_env) != 0  # stopped: its arenas say "down"


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


def test_the_tournament_container_command_runs_natively(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """`command: ["tournament", "run"]` with the service's environment: a
    two-team night to its end, its console over TLS (the certificate in
    /data/tls) healthy while it runs."""
    import ssl
    import threading

    from salvo import tls
    from salvo.bots import make_strategy
    from salvo.tournament import follow

    mosq = new_broker(users={"referee": "referee-pw"})
    data = tmp_path / "data"
    cards = {n: add_team(data / "teams.json", mosq.passwd, n) for n in ("ada", "bob")}
    tls.issue(data / "tls")
    mosq.start()
    svc = COMPOSE["services"]["tournament"]
    console = free_port()
    env = {k: _in_container(str(v), data) for k, v in svc["environment"].items()}
    env["SALVO_BROKER"] = env["SALVO_BROKER"].replace("mosquitto:1883", f"127.0.0.1:{mosq.port}")
    env |= {"SALVO_PASSWORD": "referee-pw", "SALVO_CONSOLE": f"127.0.0.1:{console}", "SALVO_RESET_AFTER": "0.5"}
    env |= {"SALVO_TURN_TIMEOUT": "5"}
    health = ("8470)", f"{console})")  # the healthcheck's port, in its (host, port) tuple
    assert _healthcheck("tournament", env, health) != 0  # nothing listens yet
    played: dict[str, int] = {}

    def team(name: str) -> None:
        broker = Broker.from_url(f"mqtt://127.0.0.1:{mosq.port}").with_credentials(name, cards[name].mqtt_password)
        played[name] = follow(broker, name, cards[name].secret, lambda: make_strategy("random", name))

    proc = subprocess.Popen(
        [sys.executable, "-m", "salvo", *svc["command"]],
        cwd=data,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SALVO_")}, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: _healthcheck("tournament", env, health) == 0, 30, "the console listening")
        context = ssl.create_default_context(cafile=str(data / "tls" / "ca.crt"))
        context.check_hostname = False  # the certificate names the broker's host; the CA is what is checked
        page = urllib.request.urlopen(f"https://127.0.0.1:{console}/", context=context, timeout=5).read()
        assert b"password" in page.lower()
        bots = [threading.Thread(target=team, args=(n,), daemon=True) for n in cards]
        for b in bots:
            b.start()
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert played == {"ada": 1, "bob": 1}
    assert (data / "salvo-tournament.json").exists() and (data / "salvo-tournament-referee.db").exists()
    assert _healthcheck("tournament", env, health) != 0  # over: the console is gone
