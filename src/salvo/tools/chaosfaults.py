"""The scenarios of ``salvo stress chaos`` for issue 29 ("nothing lost,
third round"): each proves a referee-side fix against real processes.

* ``split``: referee A frozen (SIGSTOP) until its last will says ``down``;
  B takes the arena over, from a copy of A's state file taken at the freeze
  (its own workdir and a copy of the key file, as another machine would) or
  with ``--fresh`` on an empty one; then A woken: A publishes nothing and
  exits non-zero, B plays on.
* ``reset``: kill -9 with the window held open between journaling the reset
  and publishing it (SIGSTOP the moment the spool grows at the reset); the
  restart resumes without a flag. Variant: restarted with ``--fresh``, that
  run killed at once, restarted: nothing of the finished game goes out into
  the new lobby.
* ``backup``: a ``salvo journal backup`` copy taken at an early turn and
  restored over the state file a few turns later: refused (exit 4, "the
  broker shows turn N, this journal ends at turn M"), nothing touched; the
  live file put back resumes. Variant: a copy of the live file started
  beside its running referee: refused (exit 4), nothing touched.
* ``stall``: the broker frozen (SIGSTOP) for 6-15 s between turns and
  mid-salvo, in 4 s turns: nobody loses a turn.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from salvo.arena import statefile as store
from salvo.spec.topics import Outbound
from salvo.tools.chaosdriver import GiveUp, Options, Run, Stalled
from salvo.tools.chaosgames import Plan, Report, play_games
from salvo.tools.chaosprocs import ChaosReferee
from salvo.tools.chaoswatch import on
from salvo.tools.gamemodel import Violation
from salvo.tools.localbroker import Mosquitto

SPLITS = {"copy": "from a copy of A's state file", "fresh": "with --fresh on an empty state file"}
RESETS = {
    "window": "kill -9 between journaling the reset and publishing it",
    "fresh": "kill -9 between journaling the reset and publishing it, restarted with --fresh",
}
FRESH_CRASH = "the --fresh run after the reset killed at once, restarted without a flag"
STALLS = {"between": "between turns", "mid": "mid-salvo"}

#: SIGSTOPs a process (argv 2) the moment a spool file (argv 1) grows past
#: the largest size seen (it may be emptied by a checkpoint meanwhile), or
#: after argv 3 seconds.
_STOPPER = """
import os, signal, sys, time
fd, end = os.open(sys.argv[1], os.O_RDONLY), time.monotonic() + float(sys.argv[3])
size = os.fstat(fd).st_size
print("watching", file=sys.stderr, flush=True)
grew = False
while not grew and time.monotonic() < end:
    now = os.fstat(fd).st_size
    grew, size = now > size, now
os.kill(int(sys.argv[2]), signal.SIGSTOP)
sys.exit(0 if grew else 3)
"""


def _other_referee(run: Run, name: str, *, copy_from: ChaosReferee | None) -> ChaosReferee:
    """A referee of another machine: its own workdir, a backup of ``copy_from``'s
    state file and a copy of its key file (else an empty state and a new key)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=run.dir))
    if copy_from is not None:
        store.backup(copy_from.state, workdir / "state.db")
        shutil.copy(copy_from.dir / "referee.key", workdir / "referee.key")
    other = ChaosReferee(run.broker, run.prefix, run.flags, workdir)
    other.log = workdir / f"{name}.log"
    return other


def _wait_exit(ref: ChaosReferee, seconds: float) -> int | None:
    assert ref.proc is not None
    try:
        return ref.proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


# -- split brain --------------------------------------------------------------------


def _split_at(run: Run, variant: str) -> None:
    """Freeze A past its last will, B takes over, wake A: A says nothing and stops."""
    a, t = run.ref, run.t
    with run.lock:
        lease = run.watch.latest(t.lease)
        lease_a, old_id = lease.payload if lease else b"", run.game_id
        run.up.clear()  # A's silence is not a stop the game loop should judge
        a.send(signal.SIGSTOP)
        frozen, mark = time.monotonic(), run.watch.mark()
        fault = run.fault(f"referee frozen past its will, B {SPLITS[variant]}, A woken")
        b = _other_referee(run, "b", copy_from=a if variant == "copy" else None)
        run.await_(on(t.server, equals=b"down"), mark, "A's last will", timeout=120)
        fault.outcome["will_s"] = round(time.monotonic() - frozen, 1)
        run.ref = b
        if variant == "fresh":
            run.cut = run.watch.mark()  # A's game ends here, on purpose
        if (code := run.start("--fresh") if variant == "fresh" else run.start()) is not None:
            a.kill9()
            raise Stalled(f"B exited with {code}: {b.tail()}")
        woken = run.watch.mark()
        a.send(signal.SIGCONT)
        code_a = _wait_exit(a, 60)
        if code_a is None:
            a.kill9()
        fault.outcome.update(a_exit=code_a, a_says=a.error()[:160])
        if code_a in (None, 0):
            run.violation("refusal", f"A woken after B took over exited with {code_a}, want non-zero")
        run.settle()
        end = run.settle()  # (two round trips: the broker read everything A sent before it exited)
        held = {m.topic: m.payload for m in run.watch.messages[:woken] if m.retain}  # (messages: a copy)
        said = again = 0
        for i in range(woken, end):
            m = run.watch.messages[i]
            if m.topic in (t.tool_marker("chaos"), t.sweep, t.probe):
                continue  # markers, and the referees' own sweep markers and probes
            if m.topic == t.lease and m.payload == lease_a:
                why = "A's lease"
            elif m.topic == t.game_id and m.text == old_id and variant == "fresh":
                why = "A's game id"
            elif m.topic == t.server and m.payload == b"down":
                why = "a will"  # (A's, or B's when A's reconnect took B's client id over)
            elif m.retain and held.get(m.topic) == m.payload:
                # B saying again what the broker holds: A's reconnect under the
                # same client id (the key file copied) took B's connection over
                again += 1
                continue
            else:
                why = "a message"
            run.found.append(Violation("touched", f"after A woke, {why}: {m.topic} = {m.text[:80]!r}", i))
            said += 1
        if not b.running():
            run.violation("stalled", f"B stopped after A woke (exit {b.exit_code()}): {b.tail()}")
        fault.outcome.update(said_after_wake=said, b_said_again=again)
        if variant == "fresh":
            kept = run.retained()
            if kept.get(t.state) != "lobby" or kept.get(t.game_id) in run.ids:
                run.violation("wrong", f"after B --fresh: state {kept.get(t.state)}, id {kept.get(t.game_id)}")
            raise GiveUp


def _split(o: Options, rep: Report) -> None:
    variants = ["copy"] if o.sample else [v for _ in range(o.games) for v in SPLITS]
    final = [variants[-1] == "fresh"]  # a game of B's new lobby played to its end

    def plan(run: Run) -> Plan:
        if variants:
            return {("turn", run.rng.randint(2, 4)): variants.pop(0)}
        final.clear()
        return {}

    # Turns longer than the freeze: B resumes A's turn, which must not run
    # out while nobody could act (giving that time back is not promised).
    play_games(o, rep, "split", plan, _split_at, lambda _g, _f: bool(variants or final), turn_timeout=150.0)


# -- the reset journaled, not published ---------------------------------------------


def _reset_at(run: Run, variant: str) -> None:
    """At game over: SIGSTOP the referee the moment the reset is spooled
    (before its lobby goes out), kill -9 it, start it again."""
    t = run.t
    deadline = run.watch.latest(t.deadline)
    at = float(deadline.json()["at"]) if deadline and deadline.payload else time.time()
    run.up.wait(60)
    with run.lock:
        mark, spool = run.watch.mark(), Path(f"{run.ref.state}-spool")
        args = [str(spool), str(run.ref.pid), f"{max(0.0, at - time.time()) + 3:.2f}"]
        stopper = subprocess.Popen([sys.executable, "-c", _STOPPER, *args], stderr=subprocess.PIPE, text=True)
        assert stopper.stderr is not None
        stopper.stderr.readline()  # "watching"
        grew = stopper.wait(at - time.time() + 10) == 0
        new_game = lambda m: m.topic == t.game_id and bool(m.payload) and m.text not in run.ids  # noqa: E731
        told = run.watch.wait(new_game, mark, 0.3) is not None
        if variant == "window":
            fault = run.kill(RESETS[variant], down=run.bg.uniform(0, 0.5))  # restarted without a flag
            fault.outcome.update(journaled=grew, published=told)
            return
        fault = run.kill_only(RESETS[variant])
        fault.outcome.update(journaled=grew, published=told)
        fresh = run.watch.mark()
        if (code := run.start("--fresh")) is not None:
            raise Stalled(f"--fresh exited with {code}: {run.ref.tail()}")
        time.sleep(run.bg.uniform(0, 0.3))  # the crash: at once, its backlog perhaps not all out
        run.kill_only(FRESH_CRASH)
        if (code := run.start()) is not None:
            run.violation("refusal", f"restarted after the --fresh run's crash, it exited {code}: {run.ref.tail()}")
            raise Stalled(f"the referee exited with {code}")
        end = run.settle()
        lobby = run.watch.wait(new_game, mark, 0)
        game = (t.turn, t.salvo, t.hits)
        for i in range(lobby[0] if lobby else fresh, end):
            m = run.watch.messages[i]
            route = t.parse_outbound(m.topic)
            if m.payload and (m.topic in game or (route is not None and route.kind is Outbound.HIT)):
                run.found.append(Violation("wrong", f"the last game's {m.topic} {m.text} in the new lobby", i))


def _reset(o: Options, rep: Report) -> None:
    variants = [v for _ in range(o.games) for v in RESETS]
    play_games(o, rep, "reset", lambda _run: {("reset", 0): variants.pop(0)}, _reset_at, lambda _g, _f: bool(variants))


# -- a backup restored, a copy of the live file started -----------------------------


def _backup(o: Options, rep: Report) -> None:
    copies: dict[str, tuple[Path, int]] = {}  # arena -> the backup taken this game, and its turn

    def at(run: Run, action: str) -> None:
        with run.lock:
            if action == "take":
                copy = run.dir / f"backup-{run.games}.db"
                store.backup(run.ref.state, copy)
                turn = run.watch.latest(run.t.turn)
                copies[run.prefix] = (copy, int(turn.json()["turn"]) if turn else 0)
            elif action == "live-copy":
                _live_copy(run)
            else:
                _restore(run, *copies[run.prefix])

    def plan(run: Run) -> Plan:
        a = run.rng.randint(2, 3)
        return {("turn", a): "take", ("turn", a + 1): "live-copy", ("turn", a + 3): "restore"}

    play_games(o, rep, "backup", plan, at, lambda g, _f: g < o.games)


def _live_copy(run: Run) -> None:
    """A backup of the live state file, started on another machine (its
    own workdir, the key file copied) while the first referee is up."""
    other = _other_referee(run, "copy", copy_from=run.ref)
    mark = run.settle()
    fault = run.fault("a copy of the live state file started while its referee is up")
    other.start()
    code = _wait_exit(other, 30)
    if code is None:
        other.terminate()
    text = other.error()
    fault.outcome.update(exit=code, message=text[:200])
    if code != 4 or "another referee holds it" not in text:
        run.violation(
            "refusal", f"the copy's referee exited with {code}, want 4 and 'another referee holds it': {text}"
        )
    run.untouched(mark, "the copy's referee")
    if not run.ref.running():
        run.violation("stalled", f"the first referee stopped beside the copy (exit {run.ref.exit_code()})")


def _restore(run: Run, copy: Path, turn: int) -> None:
    """Stop the referee, restore the backup over its state file as an
    organiser would (the copy's two files in place, -wal and -shm deleted):
    refused, naming how far behind; then the live file put back: resumes."""
    state, now = run.ref.state, run.watch.latest(run.t.turn)
    shown = int(now.json()["turn"]) if now else 0
    run.up.clear()
    stopped = run.ref.terminate()
    live = run.dir / f"live-{run.games}"
    live.mkdir()
    sides = ("", "-wal", "-shm", "-spool")
    for side in sides:
        if Path(f"{state}{side}").exists():
            os.rename(f"{state}{side}", live / f"state.db{side}")  # (a rename keeps the file's identity)
    shutil.copy(copy, state)
    if Path(f"{copy}-spool").exists():
        shutil.copy(f"{copy}-spool", f"{state}-spool")
    fault = run.fault(f"a backup of turn {turn} restored over the state file at turn {shown}", stop_exit=stopped)
    mark = run.settle()
    if (code := run.start()) is None:
        run.violation("refusal", f"the referee resumed a backup of turn {turn} under the broker's turn {shown}")
        return  # (the model judges what it then published)
    text = run.ref.error()
    want = f"the broker shows turn {shown}, this journal ends at turn {turn}"
    fault.outcome.update(exit=code, message=text[:200])
    if code != 4 or want not in text:
        run.violation("refusal", f"on the restored backup the referee exited with {code}, want 4 and {want!r}: {text}")
    run.untouched(mark, "the referee on the restored backup")
    for side in sides:
        Path(f"{state}{side}").unlink(missing_ok=True)
        if (kept := live / f"state.db{side}").exists():
            os.rename(kept, f"{state}{side}")
    if (code := run.start()) is not None:
        raise Stalled(f"with the live state file put back, the referee exited with {code}: {run.ref.tail()}")
    fault.outcome["live_file_back"] = "resumed"


# -- a stalled broker ---------------------------------------------------------------


def _stall_at(run: Run, action: str) -> None:
    """Freeze the broker (SIGSTOP: connections stay open, nothing moves),
    thaw it after 6-15 s; the salvo sent again once the referee answers."""
    b, t = run.restartable, run.t
    assert isinstance(b, Mosquitto) and b.proc is not None
    pid, seconds = b.proc.pid, 6.0 if run.o.sample else run.rng.uniform(6, 15)
    before, turn = run.watch.latest(t.deadline), run.watch.latest(t.turn)
    head = f'{{"turn":{turn.json()["turn"] if turn else 0},'.encode()
    with run.lock:
        os.kill(pid, signal.SIGSTOP)
        frozen, mark = time.monotonic(), run.watch.mark()
        fault = run.fault(f"broker frozen (SIGSTOP) {STALLS[action]}", stall_s=round(seconds, 1))

    def thaw() -> None:
        time.sleep(max(0.0, frozen + seconds - time.monotonic()))  # the stall itself
        os.kill(pid, signal.SIGCONT)
        run.probe()
        fault.outcome["referee_back_s"] = round(time.monotonic() - frozen - seconds, 2)
        if action == "mid":
            for topic, payload in run.sent:
                run.publish(topic, payload)  # as the SDK does when a salvo goes unanswered

    def given_back() -> None:
        """How far the turn's deadline moved before its salvo ended (the model judges the rest)."""
        end = run.await_index(on(t.salvo, starts=head), mark, "the stalled turn's salvo")
        moved = [m.json() for m in run.watch.messages[mark:end] if m.topic == t.deadline and m.payload]
        if before is not None and (ats := [float(d["at"]) for d in moved if d.get("phase") == "turn"]):
            fault.outcome["given_back_s"] = round(max(ats) - float(before.json()["at"]), 1)

    if action == "between":
        thaw()
    run.pending += [given_back] if action == "between" else [thaw, given_back]


def _stall(o: Options, rep: Report) -> None:
    if o.own_broker is None:
        rep.skipped["stall"] = "it freezes the broker: run with --own-broker"
        return

    def plan(run: Run) -> Plan:
        a = run.rng.randint(2, 3)
        out = {("turn", a): "between", ("shot", 10 * (a + 2) + 2): "mid"}
        return out if o.sample else out | {("shot", 10 * (a + 4) + run.rng.randint(1, 3)): "mid"}

    with o.own_broker(True) as broker:
        play_games(o, rep, "stall", plan, _stall_at, lambda g, _f: g < o.games, turn_timeout=4.0, broker=broker)


RUNNERS: dict[str, Callable[[Options, Report], None]] = {
    "split": _split,
    "reset": _reset,
    "backup": _backup,
    "stall": _stall,
}
