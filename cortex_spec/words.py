"""Shortening text for people: at a word or item boundary, never inside a word."""

from __future__ import annotations

__all__ = ["clip"]

_BREAKS = (", ", " ", "/", "\n")


def clip(text: str, limit: int = 160) -> str:
    """``text`` if it has at most ``limit`` characters, else its first part
    cut at the last word or item boundary before ``limit`` (a hard cut only
    when no boundary lies in the second half), followed by how much was
    left out."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(sep, 0, limit) for sep in _BREAKS)
    cut = cut if cut > limit // 2 else limit
    return f"{text[:cut].rstrip()} … ({len(text) - cut} more characters)"
