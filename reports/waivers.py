"""Waivers: known failures recorded while a backend is being brought up.

A waiver file is TOML, one ``[[waiver]]`` table per clause::

    [[waiver]]
    clause = "CP-RESOLVE-3"
    reason = "resolve is unconditional until the state column lands (#42)"
    expires = 2026-03-01

A clause not passed (failed, untested or skipped) whose waiver is in force
is reported **waived** — never passed — and does not fail the gate; a
waiver past its ``expires`` date is not applied and fails the run; a waiver
of a clause that passed (or is not claimed) is reported *stale* so it can be
removed.
"""

from __future__ import annotations

import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import attrs

from cortex_spec.clauses import Catalogue

__all__ = ["Waiver", "WaiverError", "load_waivers", "parse_waivers"]

_FIELDS = ("clause", "reason", "expires")


class WaiverError(ValueError):
    """A waiver file that cannot be used (a usage error: one line says why)."""


@attrs.frozen
class Waiver:
    clause: str
    reason: str
    expires: date

    def expired(self, today: date) -> bool:
        """A waiver is in force up to and including its ``expires`` day."""
        return today > self.expires

    def as_json(self, outcome: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"clause": self.clause, "reason": self.reason,
                                "expires": self.expires.isoformat()}
        if outcome is not None:
            data["outcome"] = outcome
        return data


def parse_waivers(text: str, catalogue: Catalogue, source: str = "<waivers>") -> list[Waiver]:
    """The waivers of a TOML text; :class:`WaiverError` names the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WaiverError(f"{source}: not valid TOML: {exc}") from None
    unknown_keys = sorted(set(data) - {"waiver"})
    if unknown_keys:
        raise WaiverError(f"{source}: unknown key(s) {', '.join(unknown_keys)}; "
                          "write one [[waiver]] table per clause")
    tables = data.get("waiver", [])
    if not isinstance(tables, list):
        raise WaiverError(f"{source}: 'waiver' must be an array of tables ([[waiver]])")
    waivers: list[Waiver] = []
    seen: set[str] = set()
    for n, table in enumerate(tables, 1):
        where = f"{source}: waiver {n}"
        missing = [f for f in _FIELDS if f not in table]
        extra = sorted(set(table) - set(_FIELDS))
        if missing or extra:
            problem = (f"lacks {', '.join(missing)}" if missing else f"has unknown key(s) {', '.join(extra)}")
            raise WaiverError(f"{where} {problem} (each needs {', '.join(_FIELDS)})")
        clause, reason, expires = table["clause"], table["reason"], table["expires"]
        if not isinstance(clause, str) or clause not in catalogue:
            raise WaiverError(f"{where}: {clause!r} is not a clause id of the spec")
        if clause in seen:
            raise WaiverError(f"{where}: a second waiver of {clause}")
        seen.add(clause)
        if not isinstance(reason, str) or not reason.strip():
            raise WaiverError(f"{where} ({clause}): the reason must be a non-empty string")
        if not isinstance(expires, date) or hasattr(expires, "hour"):
            raise WaiverError(f"{where} ({clause}): expires must be a TOML date (expires = 2026-03-01)")
        waivers.append(Waiver(clause, reason.strip(), expires))
    return waivers


def load_waivers(path: str | Path, catalogue: Catalogue) -> list[Waiver]:
    """The waivers of a TOML file; :class:`WaiverError` for a missing or
    malformed one."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise WaiverError(f"waiver file {str(target)!r}: {exc.strerror or exc}") from None
    return parse_waivers(text, catalogue, str(target))
