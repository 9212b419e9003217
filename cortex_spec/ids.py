"""TypeID identifiers: ``prefix_`` + 26 base32 characters of a UUIDv7.

Callers supply ids on create; stores never invent them (RSC-GEN-5).  An id of
the wrong prefix, a malformed one or a non-``str`` is refused with
:class:`~cortex_spec.errors.InvalidArgument`.

>>> rid = new_id(RUN)
>>> check_id(rid, RUN, "run_id") == rid
True
"""

from __future__ import annotations

import re

from typeid import TypeID

from .errors import InvalidArgument

__all__ = [
    "AGENT",
    "CHECKPOINT",
    "CONVERSATION",
    "DELIVERY",
    "MESSAGE",
    "SKILL",
    "TRAIT",
    "BEHAVIOR",
    "PERSONA",
    "OVERLAY",
    "ORCHESTRATION",
    "ORCHESTRATION_RUN",
    "PREFIXES",
    "RUN",
    "SESSION",
    "STEP",
    "SUSPENSION",
    "TOOL_CALL",
    "check_id",
    "check_optional_id",
    "is_id",
    "new_id",
]

RUN = "arun"
STEP = "astp"
TOOL_CALL = "tcall"
SUSPENSION = "sus"
CHECKPOINT = "acp"
AGENT = "agt"
SESSION = "ses"
DELIVERY = "dlv"
MESSAGE = "msg"
CONVERSATION = "conv"
SKILL = "skl"
TRAIT = "trt"
BEHAVIOR = "bhv"
PERSONA = "prs"
OVERLAY = "ovl"
ORCHESTRATION = "orchcfg"
ORCHESTRATION_RUN = "orch"

#: Every prefix this contract names, by entity.
PREFIXES = {
    "run": RUN,
    "step": STEP,
    "tool_call": TOOL_CALL,
    "suspension": SUSPENSION,
    "checkpoint": CHECKPOINT,
    "agent": AGENT,
    "session": SESSION,
    "delivery": DELIVERY,
    "message": MESSAGE,
    "conversation": CONVERSATION,
    "skill": SKILL,
    "trait": TRAIT,
    "behavior": BEHAVIOR,
    "persona": PERSONA,
    "overlay": OVERLAY,
    "orchestration": ORCHESTRATION,
    "orchestration_run": ORCHESTRATION_RUN,
}


def new_id(prefix: str) -> str:
    """A fresh, k-sortable TypeID string with ``prefix``."""
    return str(TypeID(prefix=prefix))


#: A TypeID suffix the library accepts: 26 characters of its base32 alphabet
#: (``0-9a-z`` without ``i l o u``), the first at most ``7`` (128 bits).
_SUFFIX = re.compile(r"[0-7][0-9a-hjkmnp-tv-z]{25}")


#: ``prefix_`` and a suffix :data:`_SUFFIX` matches, as one pattern per prefix
#: (the prefixes are the few kinds' constants)
_WHOLE: dict[str, re.Pattern[str]] = {}


def is_id(value: object, prefix: str) -> bool:
    """True iff ``value`` is a well-formed TypeID string with ``prefix``."""
    whole = _WHOLE.get(prefix)
    if whole is None:
        whole = _WHOLE[prefix] = re.compile(re.escape(prefix) + "_" + _SUFFIX.pattern)
    if type(value) is str and whole.fullmatch(value) is not None:
        return True  # what the checks below accept, in one match
    if not isinstance(value, str) or len(value) != len(prefix) + 27:
        return False
    if not value.startswith(prefix + "_"):
        return False
    # the library's own checks, as one match (parsing costs ~6 us per id on
    # every store call); anything it does not match gets the library's verdict
    if _SUFFIX.fullmatch(value, len(prefix) + 1) is not None:
        return True
    try:
        return TypeID.from_string(value).prefix == prefix
    except Exception:  # noqa: BLE001 - the library raises several unrelated classes
        return False


def check_id(value: object, prefix: str, field: str) -> str:
    """Return ``value`` if it is a ``prefix_`` TypeID, else ``InvalidArgument``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a str TypeID, got {type(value).__name__}")
    if not is_id(value, prefix):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InvalidArgument(f"{field} {shown!r} is not a TypeID with prefix {prefix!r}")
    return value


def check_optional_id(value: object, prefix: str, field: str) -> str | None:
    """Like :func:`check_id`, but ``None`` is allowed."""
    return None if value is None else check_id(value, prefix, field)
