"""Certifies RSC-GEN-8/13 on every write method: the entity a write stores
is measured as stored — the new row of a create, and the row after the
change for an update, a resolve, a save, a finish, a reply — and one byte
over 8 MiB is refused with ``InvalidArgument`` and nothing written, while
exactly 8 MiB is stored and read back whole.

The tests are generated, one per *size site*: a write method and the field
its payload goes in.  Sites come from three places:

* every stored kind of a declared class (``cortex_spec.kinds``): its create
  and, where the field is updated, its update, on its first text field (else
  its first JSON object field);
* each class's examples (``Examples.sites["size"]``, ``conformance/examples.py``);
* :data:`SITES` below, for the classes whose test modules give no examples
  yet (runs, suspensions, checkpoints, a2a, gateway).

A site is measured, not computed: the write is made once with a payload of
one character and its stored row measured by ``cortex_spec``'s size
function; since the payload appears once in the row, a payload of ``n``
UTF-8 bytes makes the row ``n - 1`` bytes larger.  The payloads are partly
two- and four-byte characters, so that a store measuring code points or
UTF-16 units instead of bytes lets the row one byte over through.  The conversation rows of
class a2a grow by what the store adds (participants) rather than by one
payload; they have tests of their own at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import CLASSES, Context, ids
from cortex_spec import kinds as k
from cortex_spec.a2a import Address, DeliveryState
from cortex_spec.checkpoints import Decision
from cortex_spec.clock import EPOCH
from cortex_spec.errors import InvalidArgument
from cortex_spec.testing import clause, ctx, expect, expect_raises, state_view
from cortex_spec.a2a import make_conversation, make_delivery, make_envelope
from cortex_spec.checkpoints import make_checkpoint
from cortex_spec.gateway import gateway_view, make_message
from cortex_spec.runs import make_run, make_step, make_tool_call
from cortex_spec.suspensions import make_suspension
from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

from .examples import HOME, call_listing, examples, sample
from .helpers import payload_of_bytes

#: the scopes whose views prove that a refused write wrote nothing
VIEW_SCOPES = [HOME, "ws=w1"]


@attrs.frozen
class SizeSite:
    """A write method and where its payload goes.

    ``prepare(store, ctx, world)`` makes the rows one call needs (a fresh
    pending checkpoint …); ``call(store, ctx, world, text)`` makes the write
    with ``text`` in the site's field; ``read(store, ctx, world, result)``
    reads back the entity the write stored (the largest one, when it stores
    several), afresh.  ``exact``: the store refuses exactly the rows over
    the limit (False where the contract refuses earlier, on a bound that
    does not depend on the stored row: ``finish_delivery``'s error)."""

    name: str
    cls: str
    call: Callable[[Any, Context, SimpleNamespace, str], Any]
    read: Callable[[Any, Context, SimpleNamespace, Any], Any]
    prepare: Callable[[Any, Context, SimpleNamespace], None] | None = None
    exact: bool = True
    clauses: tuple[str, ...] = ()


# -- generated from the stored kinds ------------------------------------------------------------


def _payload_field(table: k.Table) -> tuple[str, bool] | None:
    """(field, as JSON) the payload of the table's writes goes in."""
    data = [(n, s) for n, s in table.fields.items() if s.role == k.DATA]
    for n, s in data:
        if isinstance(s.kind, k.Text):
            return n, False
    for n, s in data:
        if isinstance(s.kind, k.Json):
            return n, True
    return None


def _table_sites(table: k.Table) -> list[SizeSite]:
    found = _payload_field(table)
    if found is None:
        return []
    field, as_json = found
    held = {f: v for u in table.unique for f, v in u.where}

    def value(text: str) -> Any:
        return {"p": text} if as_json else text

    def create(s: Any, c: Context, w: SimpleNamespace, text: str) -> Any:
        return getattr(s, table.method("create"))(c, sample(table, **held, **{field: value(text)}))

    def read(s: Any, c: Context, w: SimpleNamespace, result: Any) -> Any:
        key = result.id if result is not None else w.row.id
        if "get" in table.ops:
            return getattr(s, table.method("get"))(c, key)
        return next(r for r in call_listing(s, table, table.listings[0], c) if r.id == key)

    sites = [SizeSite(table.method("create"), table.cls, create, read, clauses=(table.clauses.get("create", ""),))]
    if "update" in table.ops and table.fields[field].update and "get" in table.ops:
        def prepare(s: Any, c: Context, w: SimpleNamespace) -> None:
            w.row = getattr(s, table.method("create"))(c, sample(table, **held))

        def update(s: Any, c: Context, w: SimpleNamespace, text: str) -> Any:
            return getattr(s, table.method("update"))(c, attrs.evolve(w.row, **{field: value(text)}))

        sites.append(SizeSite(table.method("update"), table.cls, update, read, prepare,
                              clauses=(table.clauses.get("update", ""),)))
    return sites


# -- hand-written sites of the classes without examples ------------------------------------------


def _run(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.run = s.create_run(c, make_run())
    w.step = s.create_step(c, make_step(w.run.id))


def _checkpoint(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.cp = s.create_checkpoint(c, make_checkpoint())


def _conversation(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.conv = s.create_conversation(c, make_conversation())


def _claimed(s: Any, c: Context, w: SimpleNamespace) -> None:
    _conversation(s, c, w)
    msg = s.record_message(c, make_envelope(w.conv.id))
    claimed = s.claim_delivery(c, s.create_delivery(c, make_delivery(msg.id)).id)
    w.delivery, w.token = claimed.id, claimed.claim_token


def _accepted(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.key = ids.new_id(ids.MESSAGE)
    w.gateway.accept(c, make_message("tg", w.key), EPOCH)


def _item(s: Any, c: Context, w: SimpleNamespace, r: Any) -> Any:
    return w.gateway.get_item(c, "tg", w.key)


def _fresh_key(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.key = ids.new_id(ids.MESSAGE)


def _accept(s: Any, c: Context, w: SimpleNamespace, text: str) -> Any:
    return w.gateway.accept(c, make_message("tg", w.key, text=text), EPOCH)


SITES: dict[str, list[SizeSite]] = {
    "runs": [
        SizeSite("create_run.input", "runs", lambda s, c, w, t: s.create_run(c, make_run(input=t)),
                 lambda s, c, w, r: s.get_run(c, r.id), clauses=("RUN-CREATE-3",)),
        SizeSite("update_run.input", "runs", lambda s, c, w, t: s.update_run(c, attrs.evolve(w.run, input=t)),
                 lambda s, c, w, r: s.get_run(c, w.run.id), _run),
        SizeSite("create_step.input", "runs", lambda s, c, w, t: s.create_step(c, make_step(w.run.id, input=t)),
                 lambda s, c, w, r: next(x for x in s.list_steps(c, w.run.id) if x.id == r.id), _run),
        SizeSite("create_tool_call.arguments", "runs",
                 lambda s, c, w, t: s.create_tool_call(c, make_tool_call(w.step.id, w.run.id, arguments=t)),
                 lambda s, c, w, r: next(x for x in s.list_tool_calls(c, w.step.id) if x.id == r.id), _run),
    ],
    "suspensions": [
        SizeSite("create_suspension.continuation", "suspensions",
                 lambda s, c, w, t: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN),
                                                                           continuation={"p": t})),
                 lambda s, c, w, r: s.get_suspension(c, r.run_id)),
    ],
    "checkpoints": [
        SizeSite("create_checkpoint.reason", "checkpoints",
                 lambda s, c, w, t: s.create_checkpoint(c, make_checkpoint(reason=t)),
                 lambda s, c, w, r: s.get_checkpoint(c, r.id)),
        SizeSite("resolve.decision.reason", "checkpoints",
                 lambda s, c, w, t: s.resolve(c, w.cp.id, Decision(approved=True, decided_by="alice", reason=t)),
                 lambda s, c, w, r: s.get_checkpoint(c, w.cp.id), _checkpoint, clauses=("CP-RESOLVE-7",)),
    ],
    "a2a": [
        SizeSite("record_message.content", "a2a",
                 lambda s, c, w, t: s.record_message(c, make_envelope(w.conv.id, content=t)),
                 lambda s, c, w, r: s.get_message(c, r.id), _conversation),
        SizeSite("finish_delivery.error", "a2a",
                 lambda s, c, w, t: s.finish_delivery(c, w.delivery, w.token, DeliveryState.FAILED, t),
                 lambda s, c, w, r: s.get_delivery(c, w.delivery), _claimed, exact=False),
    ],
    "gateway": [
        SizeSite("accept.text", "gateway", _accept, _item, _fresh_key),
        SizeSite("set_replied.reply", "gateway", lambda s, c, w, t: w.gateway.set_replied(c, "tg", w.key, t),
                 _item, _accepted),
    ],
}


def _examples_sites(cls: str) -> list[SizeSite]:
    out = []
    for site in examples()[cls].sites.get("size", ()):
        out.append(SizeSite(site.name, site.cls, site.call, site.read, site.prepare))
    return out


def all_sites() -> list[SizeSite]:
    out: list[SizeSite] = []
    for name, cls in CLASSES.items():
        for table in cls.tables:
            if not table.internal:
                out += _table_sites(table)
        out += SITES.get(name, [])
        out += _examples_sites(name)
    return out


def _params() -> list:
    # a site's own clauses (CP-RESOLVE-7 …) are marks of its case, so the report counts them
    return [pytest.param(s, marks=[pytest.mark.cortex_classes(s.cls)]
                         + ([pytest.mark.clause(*filter(None, s.clauses))] if any(s.clauses) else []),
                         id=f"{s.cls}.{s.name}")
            for s in all_sites()]


# -- the generated test --------------------------------------------------------------------------


def _world(request: Any, site: SizeSite) -> SimpleNamespace:
    w = SimpleNamespace()
    if site.cls == "gateway":
        w.gateway = request.getfixturevalue("cortex_gateway")
    return w


def _view(store: Any, site: SizeSite, w: SimpleNamespace) -> dict:
    if site.cls == "gateway":
        return gateway_view(w.gateway, [("tg", getattr(w, "key", "none"))])
    view = examples()[site.cls].viewer()(store, w, VIEW_SCOPES)
    view.update(state_view(store, VIEW_SCOPES, classes={site.cls}))
    return view


def _write(store: Any, site: SizeSite, c: Context, w: SimpleNamespace, text: str) -> tuple[Any, Any]:
    if site.prepare is not None:
        site.prepare(store, c, w)
    result = site.call(store, c, w, text)
    return result, site.read(store, c, w, result)


@pytest.mark.clause("RSC-GEN-8", "RSC-GEN-13")
@pytest.mark.parametrize("site", _params())
def test_every_write_refuses_a_stored_row_over_8_mib(request, store, clock, site):
    """One byte over the limit, as stored, is refused and writes nothing;
    exactly at the limit is stored and read back whole (where the contract
    bounds the row exactly, see :class:`SizeSite`)."""
    c = ctx(HOME, principal="alice")
    w = _world(request, site)
    clauses = ("RSC-GEN-13", "RSC-GEN-8") + tuple(x for x in site.clauses if x)
    with clause(*clauses, what=f"{site.name} with a one-character payload"):
        _, probe = _write(store, site, c, w, "x")
    base = entity_size(probe) - 1  # the row's size without its payload
    over = payload_of_bytes(MAX_ENTITY_BYTES + 1 - base)
    if site.prepare is not None:
        site.prepare(store, c, w)
    before = _view(store, site, w)
    expect_raises(clauses[0], InvalidArgument, lambda: site.call(store, c, w, over),
                  f"{site.name} storing a row of {MAX_ENTITY_BYTES + 1} bytes")
    with clause(*clauses, what=f"the store after the refused {site.name}"):
        assert _view(store, site, w) == before, "a refused oversized write changed what the store shows"
    if site.exact:
        at = payload_of_bytes(MAX_ENTITY_BYTES - base)
        with clause(*clauses, what=f"{site.name} storing a row of exactly {MAX_ENTITY_BYTES} bytes"):
            _, stored = _write(store, site, c, w, at)
            assert entity_size(stored) == MAX_ENTITY_BYTES, entity_size(stored)


@pytest.mark.clause("RSC-GEN-13")
def test_sites_cover_the_unbounded_writes():
    """(Of the suite itself.)  Every generated create and update of a stored
    kind with a text or JSON field, and the hand-written writes named
    here, has a site; a write method renamed or added without one shows up."""
    names = {s.name.split(".")[0] for s in all_sites()}
    wanted = {"create_run", "update_run", "create_step", "create_tool_call", "create_suspension",
              "create_checkpoint", "resolve", "record_message", "finish_delivery", "accept", "set_replied"}
    for cls in CLASSES.values():
        for table in cls.tables:
            if not table.internal and _payload_field(table) is not None:
                wanted.add(table.method("create"))
    wanted &= {m.name for cls in CLASSES.values() for m in cls.methods}
    with clause("RSC-GEN-13", what="write methods without a size site"):
        assert wanted <= names, sorted(wanted - names)


# -- conversations: the rows the store grows ---------------------------------------------------


def _text_of_bytes(n: int, lead: str) -> str:
    """At most 255 code points, ``n`` UTF-8 bytes (``lead`` first, ASCII)."""
    quads = max(0, -(-(n - 255) // 3))  # four-byte characters needed to stay within 255 code points
    text = lead + "\U0001F600" * quads
    return text + "n" * (n - len(text.encode("utf-8")))


def _conversation_of_size(store: Any, c: Context, target: int) -> Any:
    """A conversation whose stored size is exactly ``target`` bytes, grown
    with participants (its only field of unbounded size): a few thousand
    wide addresses, and a last one cut to fit."""
    def make(participants: tuple[Address, ...]) -> Any:
        return make_conversation(protocol="", participants=participants)

    def size(people: tuple[Address, ...]) -> int:
        return entity_size(attrs.evolve(make(people), scope=c.scope, created_at=EPOCH, updated_at=EPOCH))

    unit = (Address(_text_of_bytes(996, "00000000"), "n" * 255),)
    per = size(unit * 2) - size(unit)
    n = (target - size(()) - 60) // per
    people = tuple(Address(_text_of_bytes(996, f"{i:08d}"), "n" * 255) for i in range(n))
    rest = target - size(people) - 1 - len('{"agent":"","node":""}')  # one more address, after a comma
    agent = _text_of_bytes(min(rest - 1, 1017), "Z")
    people += (Address(agent, _text_of_bytes(rest - len(agent.encode("utf-8")), "")),)
    stored = store.create_conversation(c, make(people))
    with clause("RSC-GEN-8", what=f"a conversation grown to {target} bytes as stored"):
        assert entity_size(stored) == target, (entity_size(stored), target)
    return stored


@pytest.mark.clause("RSC-GEN-13", "RSC-GEN-8", "A2A-HOP-8")
@pytest.mark.cortex_classes("a2a")
def test_admitting_a_message_refuses_a_conversation_grown_over_8_mib(store, clock):
    """A message whose sender or receivers are new to the conversation adds
    them to its participants (A2A-HOP-8); when that would take the stored
    conversation over the limit the message is refused (``InvalidArgument``)
    and neither it nor the hop charge is stored.  A message among the
    conversation's participants adds nothing and is admitted."""
    c = ctx(HOME)
    clock.set(EPOCH)
    conv = _conversation_of_size(store, c, MAX_ENTITY_BYTES - 8)
    insider, other = conv.participants[0], conv.participants[1]
    before = state_view(store, VIEW_SCOPES, conversation_ids=[conv.id], classes={"a2a"})
    newcomer = make_envelope(conv.id, sender=insider, receivers=(Address("a-newcomer-of-some-length"),))
    expect_raises("RSC-GEN-13", InvalidArgument, lambda: store.record_message(c, newcomer),
                  "a message whose receiver would take the conversation over 8 MiB")
    with clause("RSC-GEN-13", what="the conversation and messages after the refused message"):
        assert state_view(store, VIEW_SCOPES, conversation_ids=[conv.id], classes={"a2a"}) == before
    known = make_envelope(conv.id, sender=insider, receivers=(other,))
    with clause("A2A-HOP-8", what="a message among the participants, the conversation at its size"):
        store.record_message(c, known)
        assert store.get_conversation(c, conv.id).hops_used == 1


@pytest.mark.clause("RSC-GEN-13", "RSC-GEN-8", "A2A-CONV-5")
@pytest.mark.cortex_classes("a2a")
def test_updating_a_conversation_refuses_a_row_over_8_mib(store, clock):
    """An update that makes the stored conversation one byte too large is
    refused and changes nothing; one that keeps it at the limit lands."""
    c = ctx(HOME)
    clock.set(EPOCH)
    conv = _conversation_of_size(store, c, MAX_ENTITY_BYTES - 1)
    before = store.get_conversation(c, conv.id)
    expect_raises("RSC-GEN-13", InvalidArgument,
                  lambda: store.update_conversation(c, attrs.evolve(conv, protocol="ab")),
                  "update_conversation taking the conversation to 8 MiB + 1")
    expect("RSC-GEN-13", store.get_conversation(c, conv.id), before, "the conversation after the refused update")
    with clause("RSC-GEN-13", "A2A-CONV-5", what="update_conversation taking it to exactly 8 MiB"):
        updated = store.update_conversation(c, attrs.evolve(conv, protocol="a"))
        assert entity_size(updated) == MAX_ENTITY_BYTES and updated.protocol == "a"
