"""`pytest --pyargs salvo.conformance --broker URL [...]`: the same suite as
`salvo conformance`, one test per case.

A pytest plugin (entry point ``pytest11``) rather than a conftest, because
pytest registers command-line options only from plugins and initial
conftests, and a package named with --pyargs is neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from salvo.net.mqtt import Broker
from salvo.tools.conformance.suite import Options, Result, SuiteBroken, read_team_credentials, run_suite


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("salvo conformance")
    group.addoption("--broker", default="mqtt://localhost:1883", help="broker URL of the referee under test")
    group.addoption("--prefix", default="", help="arena prefix of the referee under test")
    group.addoption("--referee-user", default=None, help="a login that reads every topic")
    group.addoption("--referee-password", default="")
    group.addoption("--team-credentials", default=None, help="file of name:password team logins")


@pytest.fixture(scope="session")
def conformance_results(pytestconfig: pytest.Config) -> dict[str, Result]:
    option = pytestconfig.getoption
    user = option("--referee-user")
    creds = option("--team-credentials")
    options = Options(
        broker=Broker.from_url(option("--broker")),
        prefix=option("--prefix"),
        referee_login=(user, option("--referee-password")) if user else None,
        teams=read_team_credentials(Path(creds).read_text()) if creds else [],
    )
    try:
        results = run_suite(options)
    except SuiteBroken as broken:  # each ERROR case errors in its own test's setup
        results = broken.results
    return {r.case.id: r for r in results}
