"""The clause catalogue: every normative rule of the project's spec, by id.

The spec is the Markdown in ``cortex_spec/spec/``; each file starts with a
metadata comment naming the class its clauses belong to::

    # Suspensions
    <!-- cortex-spec: class=suspensions requires=runs -->

and states each rule as a bullet ``- **SUSP-CLAIM-1** …`` (continuation
lines indented by two spaces).  A rule may end with its provenance: ``[D]``
(designed here: no upstream source implements it), ``[U]`` (as upstream)
or ``[U≠n]`` (upstream, deviating as row n of the file's table says); the
tag is kept apart from the text (:attr:`Clause.provenance`).  Tests name clause ids with
``@pytest.mark.clause(...)``; reports list every clause with its outcome.

Classes ``scope``, ``common``, ``machines`` and ``durability`` are not
conformance classes of their own: their clauses apply to every class a store
declares (``durability`` only where the harness provides the features its
tests need, see :attr:`cortex_spec.harness.Harness.features`).
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import attrs

__all__ = ["Clause", "Catalogue", "catalogue", "GENERAL_CLASSES", "UnknownClause"]

#: Catalogue classes whose clauses apply to every declared conformance class.
GENERAL_CLASSES = frozenset({"scope", "common", "machines", "durability"})

_META = re.compile(r"<!--\s*cortex-spec:\s*(?P<body>.*?)-->")
_CLAUSE = re.compile(r"^- \*\*(?P<id>[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+)\*\*\s*(?P<text>.*)$")
_PROVENANCE = re.compile(r"\s*\[(?P<tag>D|U|U≠\d+)\]$")
#: what a provenance tag means
PROVENANCE = {"D": "designed here", "U": "upstream"}


class UnknownClause(KeyError):
    """A test named a clause id that the spec does not define."""


@attrs.frozen
class Clause:
    id: str
    cls: str
    text: str
    section: str
    source: str
    #: ``"designed here"``, ``"upstream"``, ``"upstream, deviating (row n)"`` or ``""`` (untagged)
    provenance: str = ""


@attrs.frozen
class Catalogue:
    clauses: dict[str, Clause]
    #: class name -> classes it requires (from the ``requires=`` metadata)
    requires: dict[str, tuple[str, ...]]
    #: class name -> title of its spec file
    titles: dict[str, str]

    def __getitem__(self, clause_id: str) -> Clause:
        try:
            return self.clauses[clause_id]
        except KeyError:
            raise UnknownClause(clause_id) from None

    def __contains__(self, clause_id: object) -> bool:
        return clause_id in self.clauses

    def __iter__(self):
        return iter(self.clauses.values())

    def __len__(self) -> int:
        return len(self.clauses)

    def of_class(self, cls: str) -> list[Clause]:
        return [c for c in self.clauses.values() if c.cls == cls]

    @property
    def classes(self) -> list[str]:
        return list(self.titles)


def parse(text: str, source: str) -> tuple[str, str, tuple[str, ...], list[Clause]]:
    """Parse one spec file into ``(class, title, requires, clauses)``."""
    lines = text.splitlines()
    title = lines[0].lstrip("# ").strip() if lines else source
    meta = _META.search(text)
    if meta is None:
        raise ValueError(f"{source}: no '<!-- cortex-spec: class=... -->' metadata line")
    fields = dict(part.split("=", 1) for part in meta.group("body").split())
    cls = fields["class"]
    requires = tuple(r for r in fields.get("requires", "").split(",") if r)
    clauses: list[Clause] = []
    section = ""
    current: list[str] | None = None
    current_id = ""

    def flush() -> None:
        if current is not None:
            text = " ".join(current).strip()
            tag = _PROVENANCE.search(text)
            provenance = ""
            if tag:
                text = text[:tag.start()]
                t = tag.group("tag")
                provenance = PROVENANCE.get(t) or f"upstream, deviating (row {t[2:]})"
            clauses.append(Clause(current_id, cls, text, section, source, provenance))

    for line in lines:
        m = _CLAUSE.match(line)
        if m:
            flush()
            current_id, current = m.group("id"), [m.group("text")]
            continue
        if current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())
            continue
        if line.startswith("#"):
            flush()
            current = None
            section = line.lstrip("#").strip()
        elif current is not None:
            flush()
            current = None
    flush()
    return cls, title, requires, clauses


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue of the installed spec (parsed once per process)."""
    clauses: dict[str, Clause] = {}
    requires: dict[str, tuple[str, ...]] = {}
    titles: dict[str, str] = {}
    spec = resources.files("cortex_spec.spec")
    for entry in sorted(spec.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".md"):
            continue
        cls, title, reqs, found = parse(entry.read_text(encoding="utf-8"), entry.name)
        titles[cls] = title
        requires[cls] = reqs
        for clause in found:
            if clause.id in clauses:
                raise ValueError(f"clause {clause.id} is defined twice ({entry.name})")
            clauses[clause.id] = clause
    return Catalogue(clauses, requires, titles)
