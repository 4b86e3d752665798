"""Round orders: which arm runs when, so that whatever one call leaves behind (allocator
state, host caches, dirty L2 lines, clocks) lands on every arm alike."""

from __future__ import annotations

import functools
import itertools
import random
from typing import Sequence

# Up to this many arms every permutation is used in turn (3 arms: 6 orders), so each arm
# runs first, and follows each other arm, equally often; beyond it, a Williams design.
MAX_PERMUTED_ARMS = 4
# Past MAX_PERMUTED_ARMS, ORDER_BLOCKS blocks of the Williams design (2n rounds each), the
# arms renamed in each block: of ORDER_CANDIDATES seeded shuffles, the one that keeps the
# counts of "arm x ran k calls before arm y" most even for k in ORDER_LAGS (for k = 1 only
# the block boundaries vary: inside a block every pair is even). Seeded: the same orders
# in every run.
ORDER_SEED = 0
ORDER_BLOCKS = 64
ORDER_CANDIDATES = 24
ORDER_LAGS = (1, 2, 3)


def round_orders(names: Sequence[str]) -> list[tuple[str, ...]]:
    """The arm orders rounds cycle through: every arm first, and one and two calls after
    every other arm, equally often, round boundaries included.

    Up to MAX_PERMUTED_ARMS arms, every permutation in turn (rotations alone put an arm
    first equally often but not after every other arm equally often, which biases the
    control). Past it, a Williams design (2n orders, balanced one call back), repeated in
    blocks with the arms renamed to even out who runs one to three calls before whom
    (``_blocks``). The orders are chained (``_chain``): each starts with the arm the one
    before ended with, so every round boundary is an arm followed by itself, which every
    arm gets equally often. docs/measurement.md#round-boundaries-and-arm-orders has the measurements behind each rule.
    """
    names = tuple(names)
    if len(names) <= MAX_PERMUTED_ARMS:
        return _chain(list(itertools.permutations(names)))
    return [tuple(names[i] for i in row) for row in _blocks(len(names))]


@functools.lru_cache(maxsize=None)
def _blocks(n: int) -> tuple[tuple[int, ...], ...]:
    """ORDER_BLOCKS renamed copies of the chained Williams square on n arms (see
    ``round_orders``): greedy, each block's renaming the seeded candidate that leaves the
    running counts of (x k calls before y), k in ORDER_LAGS, closest to even."""
    block = _chain([tuple(row) for row in _williams(n)])
    rng = random.Random(ORDER_SEED)
    counts = {k: [[0] * n for _ in range(n)] for k in ORDER_LAGS}
    calls: list[int] = []
    orders: list[tuple[int, ...]] = []

    def added(seq: list[int]) -> dict:
        """The (k, x, y) pairs that appending ``seq`` to ``calls`` adds."""
        tail = calls[-max(ORDER_LAGS):]
        full = tail + seq
        return {k: [(full[i - k], full[i]) for i in range(len(tail), len(full)) if i >= k] for k in ORDER_LAGS}

    def spread(new: dict) -> float:
        total = 0.0
        for k, pairs in new.items():
            c = [row[:] for row in counts[k]]
            for x, y in pairs:
                c[x][y] += 1
            off = [c[x][y] for x in range(n) for y in range(n) if x != y]
            same = [c[x][x] for x in range(n)]
            total += max(off) - min(off) + max(same) - min(same)
        return total

    for _ in range(ORDER_BLOCKS):
        best = None
        for _ in range(ORDER_CANDIDATES):
            perm = list(range(n))
            rng.shuffle(perm)
            rows = [tuple(perm[i] for i in row) for row in block]
            new = added([a for row in rows for a in row])
            score = spread(new)
            if best is None or score < best[0]:
                best = (score, rows, new)
        _, rows, new = best
        for k, pairs in new.items():
            for x, y in pairs:
                counts[k][x][y] += 1
        orders += rows
        calls += [a for row in rows for a in row]
    return tuple(orders)


def _williams(n: int) -> list[list[int]]:
    """Williams' balanced Latin square, 2n rows: every symbol first twice, and every ordered
    pair of symbols adjacent twice, with the rows chainable (see ``_chain``).

    The square: the first row 0, 1, n-1, 2, n-2, ..., each next row shifted by one; for odd n
    also every row reversed. For even n its rows run k -> k + n/2 (first -> last), n/2
    separate pairs that no chain can join, so the square is taken twice, the second time
    with the symbols n/2 + j renamed n/2 + (j + 1) mod n/2: still balanced (a renamed
    balanced square is one), and the renamed rows join the pairs into one cycle.
    """
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        if len(first) % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(i + k) % n for i in first] for k in range(n)]
    if n % 2:
        return rows + [row[::-1] for row in rows]
    half = n // 2
    rename = [j if j < half else half + (j - half + 1) % half for j in range(n)]
    return rows + [[rename[i] for i in row] for row in rows]


def _chain(rows: list[tuple]) -> list[tuple]:
    """``rows`` reordered so that each starts with the last arm of the one before, cyclically
    (Hierholzer's algorithm on the multigraph with an edge first -> last per row; every arm
    starts as many rows as it ends in both designs, so the circuit exists)."""
    out_edges: dict = {}
    for row in rows:
        out_edges.setdefault(row[0], []).append(row)
    for edges in out_edges.values():
        edges.reverse()  # pop() from the end takes rows in their given order
    stack: list[tuple] = []
    circuit: list[tuple] = []
    node = rows[0][0]
    while True:
        if out_edges.get(node):
            row = out_edges[node].pop()
            stack.append(row)
            node = row[-1]
        elif stack:
            circuit.append(stack.pop())
            node = circuit[-1][0]
        else:
            break
    circuit.reverse()
    if len(circuit) != len(rows):
        raise RuntimeError(f"round orders could not be chained ({len(circuit)} of {len(rows)} rows)")
    return circuit
