"""A broken MongoDB adapter, for proving the faithful wrapper keeps races.

``ReadThenWriteStore`` claims the way the Go Mongo store checks its
deadline, taken one step further: it reads the run slot, decides in Python,
then writes the run with a second, unconditional operation.  Through the
faithful mongomock wrapper every single call is atomic, yet two claimers can
both read "paused" before either writes, so both win.  Certify it with
``--cortex-store mongo_mutants:ReadThenWriteHarness`` (this folder on
``PYTHONPATH``): the claim-race clauses fail.

``NoTransactionAdmissionStore`` admits an a2a message the way a store
without transactions would: an atomic, conditional charge of the
conversation, then the envelope in a second operation.  The budget itself
never overflows (the charge is conditional), but the two halves are not
one step: an identical retry racing the first call charges a second hop,
and a reader between the halves sees a charge with no envelope.
``--cortex-store mongo_mutants:NoTransactionAdmissionHarness``.
"""

from __future__ import annotations

import attrs

from cortex_spec import RunState, ids
from cortex_spec.adapters.mongo import MongoStore
from cortex_spec.adapters.mongo.harness import MongomockHarness
from cortex_spec.adapters.mongo.store import dt_out
from cortex_spec.adapters.mongo.suspensions import susp_from_doc
from cortex_spec.context import require_scope
from cortex_spec.errors import NotSuspended, SuspensionExpired
from cortex_spec.suspensions import resume_eligible


class ReadThenWriteStore(MongoStore):
    """``claim_suspension`` as ``find_one`` + checks + ``update_one``."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            now = self._now()
            slot = self._runs.find_one({"_id": run_id})
            susp = self._visible_part(slot, "susp", scope)
            if susp is None:
                raise NotSuspended(f"run {run_id} has no suspension")
            suspension = susp_from_doc(run_id, susp)
            if not resume_eligible(suspension.expires_at, now):
                raise SuspensionExpired(f"the suspension of run {run_id} has expired")
            if not self._run_paused(slot, scope):
                raise NotSuspended(f"run {run_id} is not paused")
            self._runs.update_one(  # the race: not conditional on "paused"
                {"_id": run_id},
                {"$set": {"run.state": RunState.RUNNING.value, "run.updated_at": dt_out(now)}},
            )
            return suspension


class NoTransactionAdmissionStore(MongoStore):
    """``record_message`` as a conditional charge, then an insert (no transaction)."""

    def record_message(self, ctx, envelope):
        from pymongo import ReturnDocument

        from cortex_spec.a2a import ConversationStatus, admit, same_envelope, validate_new_envelope
        from cortex_spec.adapters.mongo.a2a import _addr_out, _conversation_in, _message_doc, _message_in, _seen
        from cortex_spec.errors import AlreadyExists, ConversationClosed, ConversationNotFound, HopCeilingExceeded

        require_scope(ctx)
        now = self._now()
        candidate = validate_new_envelope(envelope, ctx, now)
        cid = candidate.conversation_id
        with self._guard():
            doc = self._a2a_conversations.find_one({"_id": cid, **_seen(ctx)})
            if doc is None:
                raise ConversationNotFound("not found")
            existing = self._a2a_messages.find_one({"_id": candidate.id})
            if existing is not None:
                if same_envelope(_message_in(existing), candidate):
                    return _message_in(existing)
                raise AlreadyExists("exists")
            conv = _conversation_in(doc)
            if conv.status != ConversationStatus.OPEN:
                raise ConversationClosed("closed")
            charged = self._a2a_conversations.find_one_and_update(
                {"_id": cid, "status": "open", "$expr": {"$lt": ["$hops_used", "$hop_ceiling"]}},
                {"$inc": {"hops_used": 1}, "$set": {"updated_at": dt_out(now)},
                 "$addToSet": {"participants": {"$each": [_addr_out(a) for a in
                                                          (candidate.sender, *candidate.receivers)]}}},
                return_document=ReturnDocument.AFTER,
            )
            if charged is None:
                raise HopCeilingExceeded("no hops left")
            _, stored = admit(conv, candidate, now)
            stored = attrs.evolve(stored, hops=charged["hops_used"])
            self._a2a_messages.insert_one(_message_doc(stored))  # the second, separate step
            return stored


class NoTransactionAdmissionHarness(MongomockHarness):
    """Faithful mongomock, opening :class:`NoTransactionAdmissionStore`."""

    name = "mongo-no-transaction-admission"

    def open(self, location, clock):
        return NoTransactionAdmissionStore(location.reopen()["cortex"], clock, close_client=True)


class ReadThenWriteHarness(MongomockHarness):
    """Faithful mongomock, opening :class:`ReadThenWriteStore`."""

    name = "mongo-read-then-write"

    def open(self, location, clock):
        return ReadThenWriteStore(location.reopen()["cortex"], clock, close_client=True,
                                  **self._gateway_options())
