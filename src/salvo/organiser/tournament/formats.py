"""Who meets whom (pure): round robin and swiss, in duels or at tables of
3-4 teams.

- Round robin, duels: every pair exactly once (the circle method; one team
  sits out each round when the count is odd).
- Round robin, tables of k: each round splits the field into tables of k
  (a smaller last table when the count does not divide, never below 2),
  choosing for each seat the team that has met the table least so far: as
  many different opponents as the rounds allow.
- Swiss: the standings order, paired so that no two teams meet again while
  a pairing without any rematch exists (an exhaustive search, fast for the
  field sizes of a night); only when none exists the fewest rematches. When
  the count is odd the lowest-ranked team that has not sat out yet sits out.
  Tables of k: the same greedy seating as above, in standings order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

Table = tuple[str, ...]


def round_robin(teams: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair once: the circle method, one bye per round when odd."""
    field_ = sorted(teams) + ([""] if len(teams) % 2 else [])
    n = len(field_)
    rounds = []
    for _ in range(n - 1):
        pairs = [(field_[i], field_[n - 1 - i]) for i in range(n // 2)]
        rounds.append([p for p in pairs if "" not in p])
        field_ = [field_[0], field_[-1], *field_[1:-1]]
    return rounds


def met_counts(tables: Iterable[Iterable[str]]) -> Counter[frozenset[str]]:
    """How often each pair of teams has shared a table."""
    met: Counter[frozenset[str]] = Counter()
    for table in tables:
        seats = list(table)
        for i, a in enumerate(seats):
            for b in seats[i + 1 :]:
                met[frozenset((a, b))] += 1
    return met


def table_sizes(n: int, k: int) -> list[int]:
    """Split n teams into tables of at most k, as even as possible, none below 2
    (with n odd and k = 2 one team is left over: it sits out)."""
    if k == 2:
        return [2] * (n // 2)
    count = -(-n // k)
    base, extra = divmod(n, count)
    return [base + 1] * extra + [base] * (count - extra)


def seat_tables(order: list[str], k: int, met: Counter[frozenset[str]]) -> list[Table]:
    """Greedy seating: each table opens with the best-placed free team and
    takes, seat by seat, the free team that has met it least (then the best placed)."""
    free = list(order)
    tables: list[Table] = []
    for size in table_sizes(len(order), k):
        table = [free.pop(0)]
        while len(table) < size:
            pick = min(free, key=lambda t: (sum(met[frozenset((t, s))] for s in table), free.index(t)))
            free.remove(pick)
            table.append(pick)
        tables.append(tuple(table))
    return tables


def round_robin_tables(teams: list[str], k: int, rounds: int) -> list[list[Table]]:
    """``rounds`` rounds of tables of ``k``: duels by the circle method, larger
    tables by greedy seating over a rotating order."""
    if k == 2:
        circle = round_robin(teams)
        return [list(circle[i % len(circle)]) for i in range(rounds)]
    order = sorted(teams)
    out: list[list[Table]] = []
    met: Counter[frozenset[str]] = Counter()
    for r in range(rounds):
        rotated = order[r % len(order) :] + order[: r % len(order)]
        tables = seat_tables(rotated, k, met)
        met += met_counts(tables)
        out.append(tables)
    return out


def default_rounds(fmt: str, teams: int, k: int = 2) -> int:
    """Round robin: enough rounds for everybody to meet everybody (exactly
    once in duels); swiss: three."""
    if fmt != "round-robin":
        return 3
    if k == 2:
        return teams - 1 + teams % 2
    return max(1, -(-(teams - 1) // (k - 1)))


def pick_bye(order: list[str], byes: list[str]) -> str:
    """Who sits out an odd round: the lowest placed that has not yet (or has least)."""
    return min(reversed(order), key=byes.count)


#: steps of the pairing search per number of rematches allowed: exhaustive for
#: a night's fields (tests/test_tournament_formats.py, up to 10 teams, well
#: under it); it bounds the time a draw can take for a field of hundreds.
SEARCH_BUDGET = 200_000


def swiss_pairs(order: list[str], met: Counter[frozenset[str]]) -> list[tuple[str, str]]:
    """Pair ``order`` (an even count, best first) with the fewest rematches,
    preferring partners close in the order. Exhaustive with pruning: returns
    the first pairing found with the least rematches, trying zero first."""
    best: list[tuple[str, str]] | None = None
    budget = 0

    def search(rest: list[str], allowed: int, acc: list[tuple[str, str]]) -> bool:
        nonlocal best, budget
        budget -= 1
        if budget < 0:
            return False  # a big field with no such pairing: settle for one more rematch
        if not rest:
            best = list(acc)
            return True
        a, others = rest[0], rest[1:]
        for b in others:
            cost = 1 if met[frozenset((a, b))] else 0
            if cost > allowed:
                continue
            acc.append((a, b))
            if search([t for t in others if t != b], allowed - cost, acc):
                return True
            acc.pop()
        return False

    for allowed in range(len(order) // 2 + 1):
        budget = SEARCH_BUDGET
        if search(order, allowed, []):
            break
    assert best is not None
    return best


def swiss_round(
    order: list[str], k: int, met: Counter[frozenset[str]], byes: list[str]
) -> tuple[list[Table], str | None]:
    """One swiss round from the standings ``order``: its tables and who sits
    out (None when nobody)."""
    field_ = list(order)
    bye = None
    if k == 2 and len(field_) % 2:
        bye = pick_bye(field_, byes)
        field_.remove(bye)
    if k == 2:
        return [tuple(p) for p in swiss_pairs(field_, met)], bye
    return seat_tables(field_, k, met), bye
