"""A linearizability checker (Wing & Gong's search with Lowe's memoisation).

Given a history — calls with invocation and response times and observed
outcomes — the checker searches for one total order of the calls that

* respects real time: a call that returned before another was invoked comes
  first, and
* reproduces every observed outcome when executed, in that order, on a
  sequential :class:`Model` (normally the reference store).

The search is the one Porcupine uses: walk the time-ordered list of
invocation/response entries; at an invocation, try to linearize that call
next (step the model, require the observed outcome), remove it and restart;
at a response, the call it belongs to should already have been linearized,
so backtrack.  Lowe's memoisation prunes configurations already seen as
``(set of linearized calls, model state)``.

Calls with an *unknown* outcome (they timed out or died) respond at +∞ and
accept any outcome: they may be placed anywhere after their invocation.

Histories split into independent sub-histories by object
(P-compositionality): calls carry the set of object keys they touch, calls
that share a key are checked together, and a call that spans every object
(``keys is None``, e.g. a list) keeps the history whole.  The sub-histories
are searched together, in turns of a few thousand steps, smallest first
(each set up when its first turn comes), and the first violation found ends
the check: one long linearizable sub-history cannot spend the budget before
a violating one is looked at, and none is set up after a violation.

Two sound reductions keep the search small without changing a verdict or
the deepest point reached: the model's answers are remembered per call and
state (the model is a function), and calls that never completed with equal
operations and outcomes ("twins", e.g. two crashed writes of one value) are
taken in invocation order only, since either order leads to mirror-image
searches.

**The replay first.**  Before a sub-history's search is set up, its calls
may be stepped through the model in invocation order (an order that always
respects real time).  Where no two calls overlap that is the only legal
order, so the replay decides alone, with the verdict, longest prefix and
refused call the search would report; in a small sub-history (up to
:data:`_REPLAY_CALLS` calls) a replay the model accepts throughout proves it
linearizable, and at the first refusal the search takes over.  Most
sub-histories of a history over many objects are decided so, at one model
step a call, without the entry list, memo or caches of a search.

The search is exponential in the worst case, so it runs under a time budget;
running out yields the verdict ``unknown`` — never a pass.

**Split calls.**  A model may declare some calls atomic only per part
(``model.is_split(op)``; a2a's ``reclaim_stale_deliveries`` is one step per
row it moves, A2A-RCL-8).  Such a call is linearized as a sequence of steps
(``model.step_part``), each placed on its own anywhere after the call's
invocation and — like every step — before its response; other calls may be
linearized between two of its steps.  The call counts as linearized when its
last step is; until then its progress is part of the configuration the memo
records, and its response entry stays in the list, so a call not complete by
its response is backtracked exactly like a plain call.  A sub-history without
split calls is searched by a leaner loop that carries no progress at all;
one of up to :data:`_SMALL_CALLS` calls by a leaner one still, which stands
for each model state by a row of what stepping each call from it gave (see
:meth:`_Search._run_small`): the same search, visiting the same
configurations in the same order.

**Counterexamples.**  For a violation the verdict reports the deepest point
the search reached: the first longest legal order of completed calls it
found (``best_order``), and the calls it could not place next at that depth,
with the outcome the model expected (``unexplained``).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Generator, Hashable, Sequence
from itertools import islice
from operator import attrgetter, le, lt
from typing import Any, Protocol

import attrs

from .history import Call
from .ops import Op, Outcome

__all__ = ["Model", "SplitModel", "Unexplained", "Verdict", "check", "partition"]


class Model(Protocol):
    """A sequential specification.

    ``step(state, op, observed)`` returns ``(accepted, next_state,
    expected)``: whether executing ``op`` in ``state`` can produce the
    ``observed`` outcome, the state after it, and the outcome the model
    itself produced (for messages).  States must be hashable, and ``step``
    a function of its arguments (the memo relies on it).
    """

    def init(self) -> Hashable: ...

    def step(self, state: Any, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome | None]: ...


class SplitModel(Model, Protocol):
    """A model with split calls (see the module docstring)."""

    def is_split(self, op: Op) -> bool: ...

    def step_part(
        self, state: Any, op: Op, observed: Outcome, partial: Any
    ) -> tuple[bool, Any, Outcome | None, Any, bool]: ...


@attrs.frozen
class Unexplained:
    """A call no legal order explains, at the deepest point the search reached."""

    call: int
    observed: str
    expected: str


@attrs.frozen
class Verdict:
    #: "ok", "violation" or "unknown" (the budget ran out)
    result: str
    #: calls of the failing sub-history (a violation), or of the sub-histories
    #: left undecided (unknown)
    calls: tuple[int, ...] = ()
    #: the longest legal prefix the search found, as call indexes
    best_order: tuple[int, ...] = ()
    #: calls that could not be placed next at that point, with the reason
    unexplained: tuple[Unexplained, ...] = ()
    #: search steps taken (configurations entered or left, model steps run)
    steps: int = 0
    seconds: float = 0.0
    partitions: int = 1

    @property
    def ok(self) -> bool:
        return self.result == "ok"


def partition(calls: Sequence[Call]) -> list[list[Call]]:
    """Split into independent sub-histories by shared object keys."""
    # (comprehensions, not map(attrgetter): on Python 3.11 an attribute read
    # in a comprehension is specialised and costs half as much)
    key_sets = [c.op.keys for c in calls]
    if key_sets and (key_sets[0] is None or key_sets[0]) and key_sets.count(key_sets[0]) == len(key_sets):
        return [list(calls)]  # every call touches the same objects (or spans them all): one sub-history
    groups: dict[Any, list[Call]] = dict.fromkeys(key_sets)  # type: ignore[arg-type]
    if None in groups:  # a call spans every object
        return [list(calls)]
    if any(len(keys) != 1 for keys in groups):
        return _partition_shared(calls)
    # the common case: every call touches one key, so calls group by key set
    if len(groups) == 1:
        return [list(calls)]
    for keys in groups:
        groups[keys] = []
    for c, keys in zip(calls, key_sets):
        groups[keys].append(c)
    return list(groups.values())


def _partition_shared(calls: Sequence[Call]) -> list[list[Call]]:
    """:func:`partition` when some call touches several keys, or none
    (union-find over keys; a call that touches nothing is alone)."""
    parent: dict[Hashable, Hashable] = {}

    def find(k: Hashable) -> Hashable:
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for c in calls:
        keys = list(c.op.keys or ())
        for k in keys[1:]:
            parent[find(k)] = find(keys[0])
    groups: dict[Hashable, list[Call]] = {}
    loose: list[Call] = []
    for c in calls:
        keys = c.op.keys or frozenset()
        if not keys:
            loose.append(c)
            continue
        groups.setdefault(find(next(iter(keys))), []).append(c)
    return list(groups.values()) + [[c] for c in loose]


#: search steps between two pauses of a search, where the budget is checked
#: (a step enters or leaves a configuration, or runs the model)
_SLICE = 256
#: pauses per turn: the sub-history searched changes every _TURN * _SLICE
#: steps, or sooner when a turn has lasted 1/_TURN of the budget (slow models)
_TURN = 16

#: The replay in invocation order goes first (see :meth:`_Search.run`) in
#: sub-histories whose calls do not overlap and in those up to this many calls;
#: ``_FAST_PATH = False`` leaves every sub-history to the search (tests compare both).
_REPLAY_CALLS = 64
_FAST_PATH = True

#: Sub-histories up to this many calls key the memo on the set of linearized
#: calls itself (an int of as many bits); larger ones on its Zobrist hash.
_EXACT_CALLS = 256

#: Sub-histories up to this many calls without split calls are searched by
#: :meth:`_Search._run_small`; ``_SMALL_LOOP = False`` leaves them to
#: :meth:`_Search._run_plain` (tests compare both).
_SMALL_CALLS = 128
_SMALL_LOOP = True
#: ... as long as its rows (n + 2 slots a state met) hold at most this many
#: slots in all (16 MiB); a search that meets more states starts again in
#: the general loop, which keeps no row per state
_SMALL_SLOTS = 1 << 21

_start = attrgetter("start")
_index = attrgetter("index")
_DONE = object()
_NO_RESULTS: dict[Any, Any] = {}

#: Per-call random 64-bit values: the XOR of those of the linearized calls
#: hashes the set in O(1) per step (Zobrist hashing).
_ZOBRIST: list[int] = []
_zobrist_source = random.Random(0x5EED)


def _zobrist(n: int) -> list[int]:
    while len(_ZOBRIST) < n:
        _ZOBRIST.append(_zobrist_source.getrandbits(64))
    return _ZOBRIST


#: ``1 << i`` per call index ``i`` (the bit of a call in a set of linearized calls)
_BITS: list[int] = []


def _bits(n: int) -> list[int]:
    while len(_BITS) < n:
        _BITS.append(1 << len(_BITS))
    return _BITS


@attrs.define
class _Result:
    """How the search of one sub-history ended."""

    result: str  # "ok" | "violation"
    best_order: tuple[int, ...] = ()
    unexplained: tuple[Unexplained, ...] = ()


class _Search:
    """The search of one sub-history (its calls sorted by invocation here
    when they are not already).

    :meth:`run` is a generator that pauses (yields) every :data:`_SLICE`
    steps, so that :func:`check` can keep the budget and interleave
    sub-histories; it leaves a :class:`_Result` in ``result``.

    The time-ordered entries form a doubly linked list (``nxt``/``prv``)
    whose nodes are the entries themselves: ``i`` is the invocation of call
    ``i`` and ``n + i`` its response, ``2n`` the head sentinel and ``2n+1``
    the tail one; the invocation of a call with an earlier twin (see
    :meth:`_twins`) is node ``2n + 2 + i`` instead (``inv[i]``), which tells
    the search to look at the twin first.  A node is its own entry, so a
    visit reads no entry table and a call's two nodes are known from the
    call.  Invocations sort before responses at equal times: calls that
    touch overlap (the conservative choice: more orders are legal, no false
    alarm).  Calls that never completed respond at +∞ (after every other
    entry).  The list always ends with a response, so a scan from the head
    stops at one before it reaches the tail.
    """

    def __init__(self, model: Model, calls: list[Call]) -> None:
        self.model = model
        self.steps = 0
        self.result: _Result | None = None
        # Each field is read once, by a comprehension (on Python 3.11 an
        # attribute read there is specialised: half the cost of map(attrgetter)).
        times = [c.start for c in calls]
        if sorted(times) != times:  # not in invocation order (sorting sorted ints is one pass at C speed)
            calls = sorted(calls, key=_start)
            times = [c.start for c in calls]
        self.calls = calls
        ends = [c.end for c in calls]
        # (no lists of the operations and outcomes: the searches read them
        # from the calls, at model steps only)
        #: calls that never completed (in call order)
        self.open = [i for i, c in enumerate(calls) if c.end is None or c.outcome.kind == "unknown"]
        if self.open:
            # +∞: a time after every other one, of the same type (a sort
            # compares keys of one type faster than ints against a float)
            # (the last invocation in their place first, so that max() sees no None)
            last = times[-1]
            for i in self.open:
                ends[i] = last
            infinity = max(ends) + 1
            for i in self.open:
                ends[i] = infinity
        self.times, self.ends = times, ends
        is_split = getattr(model, "is_split", None)
        self.split = is_split is not None and any(map(is_split, [c.op for c in calls]))
        #: no two calls overlap: each returned before the next was invoked
        #: (a call never completed can only be the last; the test that fails
        #: soonest where calls overlap goes first)
        self.sequential = all(map(lt, ends, islice(times, 1, None))) and all(map(le, times, ends))
        #: the entry list (see the class docstring), made when the search needs it
        self.nxt: list[int] = []
        self.prv: list[int] = []

    def _entries(self) -> None:
        """Make the time-ordered entry list (see the class docstring), with
        the twins of a search without split calls (``twin``, ``inv``)."""
        n, starts = len(self.calls), self.times
        m = 2 * n
        self.head, self.tail = head, tail = m, m + 1
        self.twin = twin = [-1] * n if self.split else self._twins()
        self.inv = inv = list(range(n))
        twinned = twin.count(-1) != n
        size = m + 2 + n if twinned else m + 2
        # A stable sort of invocations-then-responses by time breaks ties as
        # required: invocations first, each kind in call order.
        order = sorted(range(m), key=(starts + self.ends).__getitem__)
        nxt, prv = [-1] * size, [-1] * size
        a = head
        for b in order:
            nxt[a] = b
            prv[b] = a
            a = b
        nxt[a] = tail
        prv[tail] = a
        if twinned:  # a twin's invocation node takes the place of the call's own
            for i in self.open:  # (only calls never completed have twins)
                if twin[i] >= 0:
                    inv[i] = b = m + 2 + i
                    a, c = prv[i], nxt[i]
                    nxt[a] = prv[c] = b
                    prv[b], nxt[b] = a, c
                    nxt[i] = prv[i] = -1
        self.nxt, self.prv = nxt, prv

    def run(self) -> Generator[None, None, None]:
        """The search, after the replay in invocation order when it may decide.

        The replay alone decides a sub-history whose calls do not overlap (no
        other order respects real time); for others it is tried when they are
        small (:data:`_REPLAY_CALLS`): a replay every step of which the model
        accepts is a legal order, so the history is linearizable; at the first
        refusal the search starts from scratch (a replay costs one model step
        a call, while setting up a search costs several)."""
        if _FAST_PATH and not self.split and (self.sequential or len(self.calls) <= _REPLAY_CALLS):
            yield from self._replay()
            if self.result is not None:
                return
        self._entries()
        if self.split:
            yield from self._run_split()
        elif _SMALL_LOOP and len(self.calls) <= _SMALL_CALLS:
            yield from self._run_small()
            if self.result is None:  # too many states for rows: the general loop, from the start
                self._entries()
                yield from self._run_plain()
        else:
            yield from self._run_plain()

    def _replay(self) -> Generator[None, None, None]:
        """Step the model through the calls in invocation order.

        When no calls overlap this is the search's own course: it tries the
        calls in that order, and at a refusal backtracks to the start with
        nothing else to try; so the verdict, the longest legal prefix and the
        refused call with the expected outcome are the ones it would find.
        Leaves ``result`` unset when a refusal does not decide (calls overlap).
        """
        step = self.model.step
        state = self.model.init()
        steps = 0
        turn = _SLICE
        for x, call in enumerate(self.calls):
            accepted, state, expected = step(state, call.op, call.outcome)
            steps += 1
            if not accepted:
                self.steps += steps
                if self.sequential:
                    self.result = self._violation(list(range(x)), {} if expected is None else {x: expected})
                return
            if steps >= turn:
                self.steps += steps
                steps = 0
                yield
        self.steps += steps
        self.result = _Result("ok")

    def _twins(self) -> list[int]:
        """Symmetry among calls that never completed.

        Two such calls with equal operations and outcomes are interchangeable
        once both are invoked: nothing must follow either, and whatever had
        to precede the later one is linearized by then.  Linearizing the later
        one while the earlier is still pending leads to a mirror image of the
        search after linearizing the earlier one, so the search takes twins
        in invocation order only.  Returns ``twin``: the previous twin of each
        call, or -1.
        """
        twin = [-1] * len(self.calls)
        if len(self.open) < 2:
            return twin
        # Calls are grouped by method and arguments (hashing an Op hashes its
        # context, in Python; the fewer fields read the better, since few
        # calls with equal arguments differ in the others) and by the
        # outcome's compared fields, then their operations are compared in
        # full within a group.
        alike: dict[tuple[Any, ...], list[int]] = {}
        calls = self.calls
        for i in self.open:
            call = calls[i]
            op, outcome = call.op, call.outcome
            try:  # (one lookup, which hashes the key once: a tuple keeps no hash)
                group = alike.setdefault((op.method, op.args, outcome.kind, outcome.value), [])
            except TypeError:  # unhashable arguments or value: no twins
                continue
            if group:
                for j in reversed(group):  # most often the first one is equal
                    if calls[j].op == op:
                        twin[i] = j
                        break
            group.append(i)
        return twin

    def _violation(self, best: list[int], rejected: dict[int, Outcome]) -> _Result:
        calls = self.calls
        return _Result(
            "violation",
            tuple([calls[i].index for i in best]),
            tuple(
                [
                    Unexplained(calls[j].index, calls[j].outcome.describe(), expected.describe())
                    for j, expected in rejected.items()
                ]
            ),
        )

    def _run_small(self) -> Generator[None, None, None]:
        """:meth:`_run_plain` for a sub-history of up to :data:`_SMALL_CALLS`
        calls: the same search, visiting the same configurations in the same
        order, with the model state stood for by a *row*.

        Each distinct state met gets one row, a list: ``row[x]`` is what
        stepping call ``x`` from that state gave (``None`` until asked,
        ``False`` when refused, else the row of the state it leads to),
        ``row[n]`` the memo of the state (the sets of linearized calls seen
        with it), ``row[n + 1]`` the state itself.  The model is a function
        of (state, call), so a step asked again is read from the row — one
        list index, where a dict of results per call would hash the state
        and build and unpack a tuple at every visit; and the memo bucket of
        the next state comes with it.  Rows cost ``n + 2`` slots a state
        (hence the bound on ``n``), and the cache is on from the first step:
        at a list store a question, it never costs more than it saves.  A
        refusal keeps no outcome: where one read from a row is recorded among
        the deepest order's refusals (rarely), the model is asked again for
        what it expected.
        """
        calls = self.calls
        n = len(calls)
        step = self.model.step
        memo, own = n, n + 1  # a row's slots beyond its calls'
        unasked = [None] * n
        init = self.model.init()
        row: list[Any] = [*unasked, set(), init]
        rows: dict[Hashable, list[Any]] = {init: row}  # state -> its row
        most = _SMALL_SLOTS // (n + 2)  # rows
        twin, inv, nxt, prv = self.twin, self.inv, self.nxt, self.prv
        head, tail = self.head, self.tail
        m = 2 * n
        twins = m + 2  # the first twin's invocation node
        bits = _bits(n)  # (a list index costs less than a shift that makes a new int)
        lin = 0
        #: per depth below the current one: the call linearized there, and the
        #: row and lin before it (three lists indexed by depth rather than a
        #: stack of tuples: no tuple made and freed, and no list method called,
        #: per linearization)
        order: list[int] = [0] * n
        row_before: list[Any] = [None] * n
        lin_before: list[int] = [0] * n
        depth = 0
        # The deepest point so far: its depth, its order (``best``, copied
        # from ``order`` when the search first backtracks from it, ``stale``
        # until then: a new deepest point is reached at most n times, so the
        # copies cost at most n * n), and the calls refused at that depth with
        # what the model expected.
        best: list[int] = []
        best_len = 0
        stale = False
        rejected: dict[int, Outcome] = {}
        # A linearization counts two steps at once, its own and that of the
        # backtrack that will undo it, so a backtrack keeps no count (the
        # steps taken so far are ``steps - depth``); the search pauses after
        # linearizations and backtracks, as the general loop does, so at most
        # one scan of the entries' model steps comes between two looks at the
        # budget.
        steps = self.steps  # (the replay's, when it went first)
        turn = steps + _SLICE
        p = nxt[head]
        while True:
            if p < n:  # an invocation
                x = p
            elif p >= m:  # the invocation of a call with an earlier twin, which goes first; or the tail
                if p == tail:  # every call linearized
                    self.steps = steps - depth
                    self.result = _Result("ok")
                    return
                x = p - twins
                if not lin & bits[twin[x]]:
                    p = nxt[p]
                    continue
            else:  # a response: its call should have been linearized by now
                if not depth:
                    self.steps = steps
                    self.result = self._violation(best, rejected)
                    return
                if stale:  # leaving the deepest point: keep its order
                    best = order[:depth]
                    stale = False
                depth -= 1  # backtrack
                x = order[depth]
                row = row_before[depth]
                lin = lin_before[depth]
                q = n + x
                nxt[prv[q]] = q
                prv[nxt[q]] = q
                q = inv[x]
                nxt[prv[q]] = q
                prv[nxt[q]] = q
                p = nxt[q]
                if steps >= turn:  # (model steps since the last pause: at most one scan's)
                    self.steps = steps - depth
                    yield
                    turn = steps + _SLICE
                continue
            # an invocation: try to linearize call x next
            after = row[x]
            if not after:  # not asked yet from this state (None), or refused (False)
                if after is None:
                    steps += 1
                    call = calls[x]
                    accepted, new_state, expected = step(row[own], call.op, call.outcome)
                    if not accepted:
                        row[x] = False
                        # only the deepest order's refusals explain the violation (see _run_plain)
                        if depth == best_len and (stale or not depth) and expected is not None:
                            rejected[x] = expected
                        p = nxt[p]
                        continue
                    after = rows.get(new_state)
                    if after is None:
                        if len(rows) >= most:  # leave it to the general loop (see run)
                            self.steps = steps - depth
                            return
                        after = rows[new_state] = [*unasked, set(), new_state]
                    row[x] = after
                else:  # refused before (False)
                    if depth == best_len and (stale or not depth):
                        expected = step(row[own], calls[x].op, calls[x].outcome)[2]
                        if expected is not None:
                            rejected[x] = expected
                    p = nxt[p]
                    continue
            new_lin = lin | bits[x]
            bucket = after[memo]
            if new_lin in bucket:
                p = nxt[p]
                continue
            bucket.add(new_lin)
            # a configuration not seen before: linearize x
            steps += 2
            order[depth] = x
            row_before[depth] = row
            lin_before[depth] = lin
            row, lin = after, new_lin
            depth += 1
            a, b = prv[p], nxt[p]
            nxt[a] = b
            prv[b] = a
            q = n + x
            a, b = prv[q], nxt[q]
            nxt[a] = b
            prv[b] = a
            if depth > best_len:
                best_len = depth
                stale = True
                if rejected:
                    rejected = {}
            p = nxt[head]
            if steps >= turn:
                self.steps = steps - depth
                yield
                turn = steps + _SLICE

    def _run_plain(self) -> Generator[None, None, None]:
        """The search when no call is split.

        A configuration is the set of linearized calls (a bit set, ``lin``)
        and the model state; the memo ``seen`` maps each state to the sets
        seen with it.  Up to :data:`_EXACT_CALLS` calls those are the sets
        themselves; beyond, hashing ``lin`` would cost a pass over it at every
        step, so they are keyed by their Zobrist hash ``z`` (kept up in O(1)
        per step) and a hit is confirmed on the exact set (a clash falls back
        to the exact pairs in ``clashes``).

        ``results`` remembers each call's step per state, with the memo entry
        of the state it leads to: the model is a function, and the search
        often asks it the same question again (a read leaves the state as it
        was, and every configuration reached from it tries that call next).
        The cache starts at the first backtrack (a search that has not
        backtracked seldom asks a question twice, and most searches of small
        sub-histories never do); when most questions turn out new (states
        that keep growing), it is dropped.
        """
        n = len(self.calls)
        ops = [c.op for c in self.calls]
        observed = [c.outcome for c in self.calls]
        step = self.model.step
        # one dict per call, made at its first step (until then a shared empty one)
        results: list[dict[Hashable, tuple[bool, Any, Outcome | None, Any]]] = [_NO_RESULTS] * n
        caching = False  # until the first backtrack
        backtracked = False
        misses = 0
        exact = n <= _EXACT_CALLS
        zobrist = [] if exact else _zobrist(n)
        seen: dict[Hashable, Any] = {}  # state -> set of lin, or dict z -> lin
        clashes: set[tuple[int, Hashable]] = set()
        twin, inv, nxt, prv = self.twin, self.inv, self.nxt, self.prv
        head, tail = self.head, self.tail
        m = 2 * n
        twins = m + 2  # the first twin's invocation node
        state = self.model.init()
        lin = z = 0
        #: per linearized call, flat: the call, and the state and lin before it
        #: (three items a call: no tuple per step that the garbage collector
        #: would count and traverse while it lives; z before it is z ^ zobrist[x])
        stack: list[Any] = []
        depth = 0
        # The deepest point so far: its depth, its order (``best``, copied from
        # the stack when the search first backtracks from it, ``stale`` until
        # then; it agrees with the stack on its first ``agree`` calls, so only
        # the rest is copied), and the calls refused at that depth with what
        # the model expected.
        best: list[int] = []
        best_len = agree = 0
        stale = False
        rejected: dict[int, Outcome] = {}
        steps = self.steps  # (the replay's, when it went first)
        turn = steps + _SLICE
        p = nxt[head]
        while True:
            if p < n:  # an invocation
                x = p
            elif p >= m:  # the invocation of a call with an earlier twin, which goes first
                x = p - twins
                if not lin >> twin[x] & 1:
                    p = nxt[p]
                    continue
            else:  # a response: its call should have been linearized by now
                if not depth:
                    self.steps = steps
                    self.result = self._violation(best, rejected)
                    return
                if stale:  # leaving the deepest point: keep its order
                    del best[agree:]
                    best.extend(stack[3 * agree :: 3])
                    agree = depth
                    stale = False
                lin = stack.pop()  # backtrack
                state = stack.pop()
                x = stack.pop()
                if not exact:
                    z ^= zobrist[x]  # (XOR undoes itself)
                depth -= 1
                if not backtracked:
                    backtracked = caching = True
                if depth < agree:  # noqa: PLR1730 - a call to min() costs more in the hot loop
                    agree = depth
                q = n + x
                nxt[prv[q]] = q
                prv[nxt[q]] = q
                q = inv[x]
                nxt[prv[q]] = q
                prv[nxt[q]] = q
                p = nxt[q]
                steps += 1
                if steps >= turn:
                    self.steps = steps
                    yield
                    turn = steps + _SLICE
                continue
            # an invocation: try to linearize call x next
            if caching:
                result = results[x].get(state)
                if result is None:
                    steps += 1
                    misses += 1
                    accepted, new_state, expected = step(state, ops[x], observed[x])
                    bucket = None
                    if accepted:
                        bucket = seen.get(new_state)
                        if bucket is None:
                            bucket = seen[new_state] = set() if exact else {}
                    known = results[x]
                    if known is _NO_RESULTS:
                        known = results[x] = {}
                    known[state] = (accepted, new_state, expected, bucket)
                else:
                    accepted, new_state, expected, bucket = result
            else:
                steps += 1
                accepted, new_state, expected = step(state, ops[x], observed[x])
                if accepted:
                    bucket = seen.get(new_state)
                    if bucket is None:
                        bucket = seen[new_state] = set() if exact else {}
            if not accepted:
                # only the deepest order's refusals explain the violation: at
                # the same depth another order refuses other calls (two racing
                # resolves each refuse the other), which no one order gives
                if depth == best_len and (stale or not depth) and expected is not None:
                    rejected[x] = expected
                p = nxt[p]
                continue
            new_lin = lin | (1 << x)
            if exact:
                if new_lin in bucket:
                    p = nxt[p]
                    continue
                bucket.add(new_lin)
            else:
                new_z = z ^ zobrist[x]
                known_lin = bucket.get(new_z)
                if known_lin is None:
                    bucket[new_z] = new_lin
                else:  # the same hash: the same set, or a clash
                    key = (new_lin, new_state)
                    if known_lin == new_lin or key in clashes:
                        p = nxt[p]
                        continue
                    clashes.add(key)
            # a configuration not seen before: linearize x
            steps += 1
            stack += (x, state, lin)
            state, lin = new_state, new_lin
            if not exact:
                z = new_z
            depth += 1
            a, b = prv[p], nxt[p]
            nxt[a] = b
            prv[b] = a
            q = n + x
            a, b = prv[q], nxt[q]
            nxt[a] = b
            prv[b] = a
            if depth > best_len:
                best_len = depth
                stale = True
                if rejected:
                    rejected = {}
            p = nxt[head]
            if p == tail:
                self.steps = steps
                self.result = _Result("ok")
                return
            if steps >= turn:
                self.steps = steps
                yield
                turn = steps + _SLICE
                if caching and misses * 3 > steps > 2 * _SLICE:
                    caching = False  # most steps ran the model anyway
                    results = []

    def _run_split(self) -> Generator[None, None, None]:
        """The search with split calls: a configuration also records the
        progress of the split calls that have taken some but not all of their
        steps (``inflight``; ``unfinished`` is its canonical, hashable form)."""
        calls = self.calls
        n = len(calls)
        model: Any = self.model
        splits = [bool(model.is_split(c.op)) for c in calls]
        nxt, prv = self.nxt, self.prv
        head, tail = self.head, self.tail
        state = model.init()
        lin = 0
        inflight: dict[int, Any] = {}
        unfinished: tuple[tuple[int, Any], ...] = ()
        #: per step taken: (call, state, lin, unfinished and the call's progress
        #: before it, whether it completed the call)
        stack: list[tuple[int, Any, int, tuple[tuple[int, Any], ...], Any, bool]] = []
        order: list[int] = []  # the completed calls, in order
        seen: set[tuple[int, tuple[tuple[int, Any], ...], Hashable]] = set()
        best: list[int] = []
        best_len = agree = 0
        rejected: dict[int, Outcome] = {}
        steps = self.steps  # (the replay's, when it went first)
        turn = steps + _SLICE
        p = nxt[head]
        while True:
            x = p
            if x >= n:  # a response: its call should have been linearized (completed) by now
                if not stack:
                    self.steps = steps
                    self.result = self._violation(best, rejected)
                    return
                steps += 1
                x, state, lin, unfinished, before, done = stack.pop()
                if splits[x]:
                    if before is None:
                        inflight.pop(x, None)
                    else:
                        inflight[x] = before
                if done:
                    order.pop()
                    if len(order) < agree:  # noqa: PLR1730
                        agree = len(order)
                    q = n + x
                    nxt[prv[q]] = q
                    prv[nxt[q]] = q
                    nxt[prv[x]] = x
                    prv[nxt[x]] = x
                p = nxt[x]
            else:  # an invocation: try to linearize this call (or its next step) next
                call = calls[x]
                before = inflight.get(x)
                steps += 1
                if splits[x]:
                    accepted, new_state, expected, partial, done = model.step_part(
                        state, call.op, call.outcome, before
                    )
                else:
                    accepted, new_state, expected = model.step(state, call.op, call.outcome)
                    partial, done = None, True
                if not accepted:
                    if len(order) == best_len == agree and expected is not None:
                        rejected[x] = expected
                    p = nxt[p]
                    continue
                if splits[x]:
                    after = dict(inflight)
                    if done:
                        after.pop(x, None)
                    else:
                        after[x] = partial
                    new_unfinished = tuple(sorted(after.items()))
                else:
                    new_unfinished = unfinished
                new_lin = lin | (1 << x) if done else lin
                key = (new_lin, new_unfinished, new_state)
                if key in seen:
                    p = nxt[p]
                    continue
                seen.add(key)
                # a configuration not seen before: take the step
                stack.append((x, state, lin, unfinished, before, done))
                state, lin, unfinished = new_state, new_lin, new_unfinished
                if splits[x]:
                    inflight = after
                if done:
                    order.append(x)
                    a, b = prv[p], nxt[p]
                    nxt[a] = b
                    prv[b] = a
                    q = n + x
                    a, b = prv[q], nxt[q]
                    nxt[a] = b
                    prv[b] = a
                    if len(order) > best_len:
                        del best[agree:]
                        best.extend(order[agree:])
                        best_len = agree = len(order)
                        rejected = {}
                p = nxt[head]
                if p == tail:
                    self.steps = steps
                    self.result = _Result("ok")
                    return
            if steps >= turn:
                self.steps = steps
                yield
                turn = steps + _SLICE


def check(model: Model, calls: Sequence[Call], budget_s: float = 10.0) -> Verdict:
    """Decide whether ``calls`` is linearizable with respect to ``model``.

    The sub-histories (see :func:`partition`) are searched in turns (of
    ``_TURN * _SLICE`` steps, or a ``1/_TURN`` share of the budget), smallest
    first, so most end within their first turn; the first violation ends the
    check, and running out of ``budget_s`` seconds gives ``unknown``.  A
    sub-history's search is set up when its first turn comes (most never
    need a second), so a check that stops early sets up no others.
    """
    started = turn_started = time.monotonic()
    deadline = started + budget_s
    parts = partition(calls)
    if len(parts) == 1:  # the common case: one search, no turns to share (nor a queue to keep)
        search = _Search(model, parts[0])
        for _ in search.run():
            if time.monotonic() > deadline:
                return _unknown(parts, search.steps, started, 1)
        if search.result is not None and search.result.result == "violation":
            return _violated(search, search.result, search.steps, started, 1)
        return Verdict("ok", steps=search.steps, seconds=time.monotonic() - started)
    parts.sort(key=len)
    # one entry per undecided sub-history: [its calls, its search, the search's
    # turns]; the search is made when its first turn comes
    running: deque[list[Any]] = deque([[part, None, None] for part in parts])
    finished = 0
    pauses = 0
    while running:
        entry = running[0]
        if entry[1] is None:
            entry[1] = search = _Search(model, entry[0])
            entry[2] = search.run()
        search = entry[1]
        if next(entry[2], _DONE) is _DONE:
            running.popleft()
            finished += search.steps
            if search.result is not None and search.result.result == "violation":
                return _violated(search, search.result, finished + _steps(running), started, len(parts))
            pauses = 0
            turn_started = time.monotonic()
            continue
        now = time.monotonic()
        if now > deadline:
            return _unknown([e[0] for e in running], finished + _steps(running), started, len(parts))
        pauses += 1
        if pauses >= _TURN or (now - turn_started) * _TURN > budget_s:
            running.rotate(-1)
            pauses = 0
            turn_started = now
    return Verdict("ok", steps=finished, seconds=time.monotonic() - started, partitions=len(parts))


def _violated(search: _Search, found: _Result, steps: int, started: float, partitions: int) -> Verdict:
    """The verdict of a check ended by the violation ``search`` found (its ``result``)."""
    return Verdict(
        "violation",
        calls=tuple([c.index for c in search.calls]),
        best_order=found.best_order,
        unexplained=found.unexplained,
        steps=steps,
        seconds=time.monotonic() - started,
        partitions=partitions,
    )


def _unknown(undecided: list[list[Call]], steps: int, started: float, partitions: int) -> Verdict:
    """The verdict of a check out of budget with sub-histories ``undecided``."""
    return Verdict(
        "unknown",
        calls=tuple(map(_index, sorted((c for part in undecided for c in part), key=_start))),
        steps=steps,
        seconds=time.monotonic() - started,
        partitions=partitions,
    )


def _steps(running: deque[list[Any]]) -> int:
    """Steps taken by the searches of undecided sub-histories."""
    if not running:
        return 0
    return sum(e[1].steps for e in running if e[1] is not None)
