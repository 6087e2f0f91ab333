"""``salvo stress chaos``: whole games against a real referee process under
faults; every published result checked against an independent model.

Three scripted teams whose fleets the harness knows play against
``python -m salvo referee`` (restarted each time with the same state file
and key) on a broker, while faults are injected at named points and at
random instants (:mod:`salvo.tools.chaosdriver` plays, :mod:`salvo.tools.gamemodel`
predicts and judges):

* ``kill``: kill -9 in the lobby, during a key derivation (its "deriving
  key" log line), mid-placement, mid-salvo, between journaling a shot and
  publishing its hit (SIGSTOP the moment the spool grows, then SIGKILL), at
  game over, at the reset, and at random instants.
* ``freeze``: SIGSTOP/SIGCONT at random instants; and once a game across the
  turn deadline, the salvo sent while the referee is frozen.
* ``broker`` / ``broker-volatile``: the broker restarted with / without
  persistence: between turns, mid-salvo, and mid-salvo for longer than the
  turn. The teams send their salvo again once the referee answers (as the SDK does).
* ``disk``: the state file on a small tmpfs, filled mid-game; then freed.
* ``damage``: the state file truncated to 0, its -wal deleted, all its files
  deleted: after a kill, or under the running referee (then kill -9 or SIGTERM).
* ``second``: a second referee (the same state file, the same key and so
  client id, another key), before and during a game.
* ``split``, ``reset``, ``backup``, ``stall`` (:mod:`salvo.tools.chaosfaults`): a
  referee frozen past its last will while another takes its arena over, then
  woken; kill -9 between journaling the reset and publishing it; a backup
  restored under a broker that is ahead of it, and a copy of the live file
  started beside its referee; the broker frozen (SIGSTOP) for 6-15 s.
* ``nats`` (:mod:`salvo.tools.chaosnats`, opt-in): a three-node NATS cluster
  (JetStream, MQTT 3.1.1) started for the run; a node killed (-9) under the
  referee mid-salvo, under the teams mid-salvo, between turns and at random
  instants, and started again after 1-5 s. Skipped without ``nats-server``.

Violations (the model's verdict): a prediction never published (lost), a
result cleared or going back (undone), a wrong result, an error report to a
team for a message it did not send or a redelivered one, a refusal that is
not one (exit code, message), a refused referee that touched the arena, a
game that stalled. Each is charged to the last fault injected before it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from salvo.tools import chaosfaults, chaosnats
from salvo.tools.chaosdriver import (
    DAMAGES,
    KILLS,
    SECONDS,
    WHEN,
    GiveUp,
    Options,
    Run,
    Stalled,
)
from salvo.tools.chaosgames import Plan, Report, play_games
from salvo.tools.chaosprocs import ChaosReferee, throwaway_broker

__all__ = ["SCENARIOS", "Options", "Report", "run_chaos", "throwaway_broker"]

SCENARIOS = (
    "kill",
    "freeze",
    "broker",
    "broker-volatile",
    "disk",
    "damage",
    "second",
    "split",
    "reset",
    "backup",
    "stall",
    "nats",
)


# -- kill -9 ------------------------------------------------------------------------


def _kill_plan(run: Run) -> Plan:
    r = run.rng
    salvo = r.randint(2, 5)
    return {
        ("listed", r.randrange(2)): "lobby",
        ("join", r.randrange(3)): "derive",
        ("place", r.randrange(5, 13)): "placement",
        ("shot", 10 * salvo + r.randint(1, 2)): "salvo",
        ("journal", 10 * (salvo + r.randint(1, 3)) + r.randint(1, 2)): "journal",
        ("over", 0): "over",
        ("reset", 0): "reset",
    }


def _kill_at(run: Run, action: str) -> None:
    t = run.t
    if action == "derive":  # its log line: the derivation is under way
        line, end = f"join {run.joining}: deriving key", time.monotonic() + 10
        while line not in run.ref.text(run.log_at):
            if time.monotonic() > end:
                return  # nothing derived (a random kill took the referee meanwhile): no fault here
            time.sleep(0.002)
    elif action == "salvo":
        n, k, target = run.shot
        part = f'"turn":{n},"shot":{k},'.encode()  # (the game follows: v2.1)
        run.await_(lambda m: m.topic == t.hit(target) and part in m.payload, 0, f"hit {k} of turn {n}")
    elif action == "reset":
        deadline = run.watch.latest(t.deadline)
        at = float(deadline.json()["at"]) if deadline and deadline.payload else time.time()
        time.sleep(max(0.0, at - time.time() + run.rng.uniform(-0.15, 0.05)))
    elif action == "over":
        time.sleep(run.rng.uniform(0, 0.01))
    run.kill(KILLS[action])


def _random_kills(run: Run, stop: threading.Event) -> None:
    while not stop.wait(run.bg.uniform(0.5, 4.5)):
        with contextlib.suppress(Stalled):
            run.kill(KILLS["random"])


def _kill(o: Options, rep: Report) -> None:
    play_games(o, rep, "kill", _kill_plan, _kill_at, lambda g, f: g < o.games or f < o.kills, background=_random_kills)


# -- freeze -------------------------------------------------------------------------


def _freeze_at(run: Run, _action: str) -> None:
    """Frozen from the turn's start until after its deadline; the salvo is
    sent meanwhile (late); thawed once the broker has it."""
    deadline = run.watch.latest(run.t.deadline)
    at = float(deadline.json()["at"]) if deadline else time.time()
    run.lock.acquire()
    run.ref.send(signal.SIGSTOP)
    time.sleep(max(0.0, at - time.time()) + run.rng.uniform(0.2, 1.0))  # the freeze itself
    fault = run.fault("SIGSTOP across the turn deadline, salvo sent while frozen")

    def thaw() -> None:
        try:
            run.flush()
            fault.outcome["late_s"] = round(time.time() - at, 3)
            run.ref.send(signal.SIGCONT)
        finally:
            run.lock.release()

    run.pending.append(thaw)


def _random_freezes(run: Run, stop: threading.Event) -> None:
    while not stop.wait(run.bg.uniform(0.3, 2.0)):
        with run.lock:
            if run.ref.running():
                seconds = run.bg.uniform(0.05, 1.2)
                run.ref.send(signal.SIGSTOP)
                run.fault("SIGSTOP/SIGCONT at a random instant")
                stop.wait(seconds)
                run.ref.send(signal.SIGCONT)


def _freeze(o: Options, rep: Report) -> None:
    play_games(
        o,
        rep,
        "freeze",
        lambda run: {("turn", run.rng.randint(2, 6)): "late"},
        _freeze_at,
        lambda g, _f: g < o.games,
        turn_timeout=2.5,
        background=_random_freezes,
    )


# -- broker restarts ----------------------------------------------------------------


def _broker_at(run: Run, action: str) -> None:
    b = run.restartable
    assert b is not None
    outage = 0.0 if action != "long" else 6.0 if run.o.sample else run.rng.uniform(5, 15)
    kind = "with" if b.persistence else "without"
    where = {"between": "between turns", "mid": "mid-salvo", "long": "mid-salvo, outage longer than the turn"}
    subs, back = run.watch.subscribed, threading.Event()
    with run.lock:
        b.stop()
        fault = run.fault(f"broker restart {kind} persistence, {where[action]}", outage_s=round(outage, 1))
        started = time.monotonic()

        def later() -> None:
            time.sleep(outage)
            b.start()
            back.set()

        threading.Thread(target=later, daemon=True).start()
    if action != "between" and not b.persistence:
        run.loose.add(run.shot[0])  # hits in flight in the broker are lost with it

    def resume() -> None:
        """Back: the watcher's subscription, the referee's (it answers), then
        the salvo sent again, as the SDK does when the referee comes back."""
        if not back.wait(outage + 30) or not run.watch.wait_subscribed(subs, 30):
            raise Stalled("the broker or the watcher did not come back")
        run.probe()
        fault.outcome["referee_back_s"] = round(time.monotonic() - started - outage, 2)
        if action != "between":
            for topic, payload in run.sent:
                run.publish(topic, payload)

    if action == "between":
        resume()
    else:
        run.pending.append(resume)


def _broker(o: Options, rep: Report, persistence: bool) -> None:
    scenario = "broker" if persistence else "broker-volatile"
    if o.own_broker is None:
        rep.skipped[scenario] = "it restarts the broker: run with --own-broker"
        return

    def plan(run: Run) -> Plan:
        a = run.rng.randint(2, 4)
        return {("turn", a): "between", ("shot", 10 * (a + 1) + 2): "mid", ("shot", 10 * (a + 3) + 1): "long"}

    with o.own_broker(persistence) as broker:
        play_games(o, rep, scenario, plan, _broker_at, lambda g, _f: g < o.games, turn_timeout=4.0, broker=broker)


# -- a full disk --------------------------------------------------------------------


def _mount_error(directory: Path) -> str | None:
    """Mount a 8 MiB tmpfs on ``directory``; why not, if it cannot be."""
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(directory)],
            check=False,
            capture_output=True,
            text=True,
        )
    except OSError as exc:
        return str(exc)
    return done.stderr.strip() or f"mount exited with {done.returncode}" if done.returncode else None


def _umount(directory: Path) -> None:
    subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


def _disk_prepare(run: Run) -> None:
    disk = run.dir / "disk"
    disk.mkdir()
    if why := _mount_error(disk):
        raise Stalled(f"cannot mount a tmpfs: {why}")
    run.cleanup.append(lambda: _umount(disk))
    run.ref = ChaosReferee(run.broker, run.prefix, run.flags, run.dir, state=disk / "state.db")
    run.on_exit = _disk_exit


def _disk_at(run: Run, _action: str) -> None:
    """Fill the state file's disk to the last byte."""
    fd = os.open(run.ref.state.parent / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    run.fault("the state file's disk filled mid-game")


def _disk_exit(run: Run, code: int) -> bool:
    """The referee stopped on the full disk: exit 4 with a reason; then free
    the space, check that the journal holds every published hit, restart."""
    fault = run.faults[-1]
    text = run.ref.error()
    fault.outcome.update(exit=code, message=text)
    if code != 4 or "disk is full" not in text:
        run.violation("refusal", f"on a full disk the referee exited with {code}, want 4 and 'disk is full': {text}")
    (run.ref.state.parent / "filler").unlink(missing_ok=True)
    run.durable()
    run.up.clear()
    if (again := run.start()) is not None:
        run.violation("refusal", f"with the space freed the referee exited with {again}: {run.ref.tail()}")
        return False
    return True


def _disk(o: Options, rep: Report) -> None:
    probe = Path(tempfile.mkdtemp(prefix="mount-", dir=o.workdir))
    why = _mount_error(probe)
    if why is None:
        _umount(probe)
        plan: Callable[[Run], Plan] = lambda run: {("turn", run.rng.randint(3, 7)): "fill"}  # noqa: E731
        play_games(o, rep, "disk", plan, _disk_at, lambda g, _f: g < o.games, prepare=_disk_prepare)
    else:
        rep.skipped["disk"] = f"cannot mount a tmpfs for the state file (needs root): {why}"
    shutil.rmtree(probe, ignore_errors=True)


# -- a damaged state file -----------------------------------------------------------


def _spoil(state: Path, how: str) -> None:
    if how == "truncate":
        os.truncate(state, 0)
    for suffix in {"wal": ["-wal"], "delete": ["", "-wal", "-shm", "-spool"]}.get(how, []):
        Path(f"{state}{suffix}").unlink(missing_ok=True)


def _damage_at(run: Run, action: str) -> None:
    """Damage the state file; the restarted referee must resume exactly or
    refuse (exit 4, naming the file and the game, touching nothing); then
    --fresh starts a new game on purpose."""
    how, when = action.split("/")
    state, t = run.ref.state, run.t
    with run.lock:
        run.up.clear()
        if when == "down":
            first = run.ref.kill9()
            _spoil(state, how)
        else:
            _spoil(state, how)
            assert run.ref.proc is not None
            try:
                first = run.ref.proc.wait(2.5)  # noticed by itself?
            except subprocess.TimeoutExpired:
                first = run.ref.kill9() if when == "live-kill" else run.ref.terminate()
        fault = run.fault(f"state file {DAMAGES[how]}, {WHEN[when]}", first_exit=first)
        mark = run.settle()
        if (code := run.start()) is None:
            fault.outcome["restart"] = "resumed"  # the model judges the rest of the game
            return
        text = run.ref.error()
        fault.outcome.update(restart=code, message=text)
        if code != 4 or str(state) not in text or run.game_id not in text:
            run.violation("refusal", f"restart exited {code}, want 4 naming {state} and game {run.game_id}: {text}")
        run.untouched(mark, "the referee that refused")
        run.cut = run.watch.mark()
        if (code := run.start("--fresh")) is not None:
            raise Stalled(f"--fresh exited with {code}: {run.ref.tail()}")
        kept = run.retained()
        stale = sorted(set(kept) - {t.server, t.pubkey, t.version, t.lease, t.state, t.game_id})
        if kept.get(t.state) != "lobby" or kept.get(t.game_id) in run.ids or stale:
            run.violation("wrong", f"after --fresh: state {kept.get(t.state)}, id {kept.get(t.game_id)}, kept {stale}")
    raise GiveUp


def _damage(o: Options, rep: Report) -> None:
    variants = [f"{how}/{when}" for when in WHEN for how in DAMAGES] * o.games
    if o.sample:
        variants = ["truncate/down", "wal/down", "delete/down", "delete/live-kill", "wal/live-stop"]
    final = [True]  # a last game on the fresh referee, played to its end

    def plan(run: Run) -> Plan:
        if variants:
            return {("turn", run.rng.randint(2, 4)): variants.pop(0)}
        final.clear()
        return {}

    play_games(o, rep, "damage", plan, _damage_at, lambda _g, _f: bool(variants or final))


# -- a second referee ---------------------------------------------------------------


def _second_at(run: Run, action: str) -> None:
    when = "before a game" if action == "lobby" else "during a game"
    with run.lock:
        for variant, what in SECONDS.items():
            workdir = run.dir if variant == "same-state" else Path(tempfile.mkdtemp(dir=run.dir))
            if variant == "same-key":
                shutil.copy(run.dir / "referee.key", workdir / "referee.key")
            other = ChaosReferee(run.broker, run.prefix, run.flags, workdir)
            other.log = workdir / f"second-{variant}.log"
            mark = run.settle()
            fault = run.fault(f"second referee with {what}, {when}")
            other.start()
            assert other.proc is not None
            try:
                code: int | None = other.proc.wait(30)
            except subprocess.TimeoutExpired:
                code = other.terminate()
            text = other.error()
            fault.outcome.update(exit=code, message=text)
            want = "in use by another referee" if variant == "same-state" else "another referee holds it"
            if code != 4 or want not in text:
                run.violation("refusal", f"a second referee exited with {code}, want 4 and {want!r}: {text}")
            run.untouched(mark, "the second referee")


def _second(o: Options, rep: Report) -> None:
    plan: Callable[[Run], Plan] = lambda run: {("game", 0): "lobby", ("turn", run.rng.randint(2, 5)): "turn"}  # noqa: E731
    play_games(o, rep, "second", plan, _second_at, lambda g, _f: g < o.games)


RUNNERS: dict[str, Callable[[Options, Report], None]] = {
    "kill": _kill,
    "freeze": _freeze,
    "broker": lambda o, rep: _broker(o, rep, True),
    "broker-volatile": lambda o, rep: _broker(o, rep, False),
    "disk": _disk,
    "damage": _damage,
    "second": _second,
    **chaosfaults.RUNNERS,
    **chaosnats.RUNNERS,
}


def run_chaos(o: Options, scenarios: Sequence[str] = SCENARIOS) -> Report:
    """Run the scenarios; the report says per fault runs / survived / lost."""
    if unknown := [s for s in scenarios if s not in RUNNERS]:
        raise ValueError(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    rep = Report()
    for scenario in scenarios:
        RUNNERS[scenario](o, rep)
    return rep
