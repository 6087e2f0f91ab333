"""A bounded sample of ``salvo stress chaos``: real referee processes killed,
frozen, cut off from a restarted or frozen broker, their state files damaged
or restored from a backup, a second referee started beside them or taking
their arena over, nodes of a NATS cluster killed under them (``-m long``),
with every published result judged by the harness's model. The full run is ``salvo stress chaos --own-broker``
(docs/reliability.md); this one keeps CI under its budget."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from salvo.tools.chaos import SCENARIOS, Options, run_chaos, throwaway_broker

pytestmark = pytest.mark.broker

#: The scenarios a sample covers, and the faults each must have injected;
#: the volatile broker, the freeze and the split brain (a minute: the frozen
#: referee's will takes 45 s) run with ``pytest -m long``.
LONG = ("broker-volatile", "freeze", "split")
SAMPLE = [pytest.param(s, marks=pytest.mark.long) if s in LONG else s for s in SCENARIOS if s not in ("disk", "nats")]


@pytest.mark.parametrize("scenario", SAMPLE)
def test_a_referee_under_faults_loses_undoes_and_invents_nothing(scenario: str, tmp_path: Path) -> None:
    with throwaway_broker() as (broker, _own):
        options = Options(broker, tmp_path, seed=7, games=1, kills=4, own_broker=throwaway_broker, sample=True)
        report = run_chaos(options, [scenario])
    assert report.faults.get(scenario), f"{scenario}: no fault was injected"
    assert report.violations == [], report.text()
    rows = report.rows()
    assert all(runs >= 1 and ok == runs and lost == 0 for _label, runs, ok, lost in rows), report.text()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root only)")
def test_a_full_disk_stops_the_referee_with_exit_4_and_it_continues_once_freed(tmp_path: Path) -> None:
    with throwaway_broker() as (broker, _own):
        options = Options(broker, tmp_path, seed=7, games=1, own_broker=throwaway_broker, sample=True)
        report = run_chaos(options, ["disk"])
    if "disk" in report.skipped:
        pytest.skip(report.skipped["disk"])
    assert report.faults.get("disk") and report.violations == [], report.text()


@pytest.mark.long
def test_a_referee_on_a_nats_cluster_survives_losing_nodes_under_it_and_its_teams(tmp_path: Path) -> None:
    """Three games (one chosen node kill each: under the referee, under the
    teams, between turns) and random kills beside them, on a three-node
    NATS cluster the scenario starts (a minute or two)."""
    with throwaway_broker() as (broker, _own):  # unused by the scenario: Options needs one
        options = Options(broker, tmp_path, seed=41, games=3, kills=4, sample=True)
        report = run_chaos(options, ["nats"])
    if "nats" in report.skipped:
        if os.environ.get("SALVO_REQUIRE_NATS"):
            pytest.fail(report.skipped["nats"])
        pytest.skip(report.skipped["nats"])
    assert len(report.faults.get("nats", [])) >= 4, report.text()
    assert report.violations == [], report.text()
