"""The order of an interleaved round (``runners.jobs.interleave``): which of a round's decodes runs first, second, ...

Order (``round_order``, scheme ``balanced``, the default): the decodes of a round are *slots* with names
that do not change from round to round: a job's folder name, and ``ar/<job>`` for a paired AR decode (the
reference of ``<job>``, the first job of the pair in the sweep's order that divides by it). Rounds come in
*pairs*: round ``2q`` runs a base order rotated left by ``shift_q``, round ``2q + 1`` the same order
reversed. A block is ``2n`` rounds for ``n`` slots (block ``r // 2n``); its base order is the slots sorted
by name and shuffled by ``random.Random(round_seed(seed, pair, 2n · block))``, and ``shift_q = q · step
mod n`` with ``step`` the integer prime to ``n`` nearest ``n / φ`` (φ the golden ratio: the shifts of any
prefix spread over the round as evenly as a rotation allows; a Weyl sequence). What that guarantees:

- after every *pair* of rounds, every slot's mean position is exactly ``(n − 1) / 2``, and every two slots
  have run in each order once: a cost that grows or shrinks with the position (a linear drift inside a
  round) reaches every slot alike, at any even number of rounds, not only after ``n`` of them;
- over a block every slot runs at every position exactly twice (a Latin square and its mirror), so a cost
  tied to particular positions (the first decodes of a round ran ~20 % slower on a GPU,
  ``results/committed/gpu_mini_gammatune_table2``) reaches every slot alike too.

Recipes run far fewer rounds than slots (``mini_gammatune_table2``: 7 rounds of 37 slots), and that is
why the scheme changed. The cyclic Latin square that ran before (scheme ``latin``: round ``r`` the base
rotated by ``r mod n``, the base reshuffled every ``n`` rounds) balances positions only after ``n``
rounds: in 7 of 37 a slot visits 7 neighbouring positions, two slots keep their relative order in most
rounds, and the A/A twin of both committed ``mini_gammatune_table2`` runs read ~1 % fast, with the rounds
where it ran after its original carrying it. Independent shuffles per round (scheme ``shuffle``,
``random.Random(round_seed(seed, pair, r))`` over the round's decodes) balance positions only on average:
on a GPU they left an A/A pair reading 1.19-1.24. Both stay selectable
(``hydra.launcher.scheme``) to re-run an earlier sweep in its order.

Uneven rounds (a job that finished or failed, a job resumed with some units done, a round whose jobs
need more or fewer distinct references) have another slot set: the same rule applies to the slots
present, ``n`` their number. The order of round ``r`` thus depends on the seed, the pair, ``r`` and the
names of its slots only, never on earlier rounds: a resumed sweep runs a round in the order the first
run would have. Every complete block of one slot set is balanced exactly, and so is every complete pair
of rounds of one slot set.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


def round_seed(seed: int, group: str, round_index: int) -> int:
    """The shuffle seed of one round: a hash of the sweep's seed, the pair and the round (stable across
    Python processes, unlike ``hash``)."""
    digest = hashlib.sha256(f"{seed}/{group}/{round_index}".encode()).hexdigest()
    return int(digest[:12], 16)


#: balanced: pairs of mirrored rotations (the default); latin: the cyclic Latin square that ran before it;
#: shuffle: the independent shuffles that ran before that (module docstring).
SCHEMES = ("balanced", "latin", "shuffle")


@dataclass(frozen=True)
class RoundOrder:
    """The order of one round: ``order[p]`` is the index (into the slots given) of the decode at position
    ``p``; ``seed`` the shuffle's seed (balanced, latin: the block's), ``shift`` the base order's rotation and
    ``reversed`` whether the rotated order runs backwards (balanced: the second round of a pair)."""

    order: list[int]
    seed: int
    scheme: str
    shift: int | None = None
    reversed: bool = False


def golden_step(n: int) -> int:
    """The rotation step of the ``balanced`` scheme: the integer in ``1 .. n`` prime to ``n`` nearest
    ``n / φ`` (ties: the smaller), so that ``q · step mod n`` visits every shift once in ``n`` pairs and
    spreads any prefix of them (a Weyl sequence with the golden ratio's conjugate). 1 for ``n ≤ 2``."""
    if n <= 2:
        return 1
    target = n * (math.sqrt(5) - 1) / 2
    return min((s for s in range(1, n) if math.gcd(s, n) == 1), key=lambda s: (abs(s - target), s))


def round_order(slots: Sequence[str], seed: int, group: str, round_index: int, scheme: str = "balanced") -> RoundOrder:
    """The order round ``round_index`` of pair ``group`` decodes its ``slots`` in (module docstring).
    ``balanced``: pairs of rounds, a rotation of the block's base order by ``q · golden_step(n) mod n`` and its
    mirror; ``latin``: a row of a cyclic Latin square (base rotated by ``r mod n``, a new base every ``n``
    rounds); both shuffle a base sorted by the slots' names, so the order does not depend on the order
    ``slots`` are given in. ``shuffle``: ``slots`` as given, shuffled by the round's own seed."""
    n = len(slots)
    if scheme == "shuffle":
        shuffle_seed = round_seed(seed, group, round_index)
        order = list(range(n))
        random.Random(shuffle_seed).shuffle(order)
        return RoundOrder(order, shuffle_seed, scheme)
    if scheme not in SCHEMES:
        raise ValueError(f"interleave scheme must be one of {SCHEMES}, got {scheme!r}")
    if n == 0:
        return RoundOrder([], round_seed(seed, group, round_index), scheme, 0)
    if scheme == "latin":
        shift, first, mirrored = round_index % n, round_index - round_index % n, False
    else:
        within = round_index % (2 * n)
        shift, first, mirrored = (within // 2) * golden_step(n) % n, round_index - within, within % 2 == 1
    block_seed = round_seed(seed, group, first)
    base = sorted(range(n), key=lambda i: slots[i])  # by name (ties: as given), then shuffled
    random.Random(block_seed).shuffle(base)
    order = base[shift:] + base[:shift]
    return RoundOrder(order[::-1] if mirrored else order, block_seed, scheme, shift, mirrored)
