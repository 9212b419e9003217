"""The Markdown summary: for a CI job's page (``$GITHUB_STEP_SUMMARY``) or a
pull-request comment.  Verdict, a per-class table, every clause not passed
with its rule, expected versus observed and a replay command, the waivers,
and the environment."""

from __future__ import annotations

from typing import Any

from cortex_spec.words import clip

from .model import NOT_PASSED
from .text import _COLUMNS, per_class

__all__ = ["cell", "code", "render_markdown"]


def code(text: str) -> str:
    """``text`` as inline code, whatever backticks it holds."""
    text = " ".join(str(text).split())
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: str) -> str:
    """``text`` made safe for one table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _mark(report: dict[str, Any]) -> str:
    if report["certified"]:
        return "✅"
    return "⚠️" if report["gate"] == "pass" else "❌"


def render_markdown(report: dict[str, Any], *, max_failures: int = 30) -> str:
    store = report["store"]
    lines = [
        f"## {_mark(report)} cortex-spec: {cell(store.get('name', '?'))} (profile {report['profile']})",
        "",
        f"**{cell(report['verdict'])}**",
        "",
        (f"Store {code(store.get('spec', store.get('name', '?')))} · {report['duration_s']:.0f}s · "
         f"seed {report['run']['seed']} · cortex-spec {report['environment'].get('cortex_spec')}"),
        "",
        "| class | status | " + " | ".join(_COLUMNS) + " |",
        "|---|---|" + "---:|" * len(_COLUMNS),
    ]
    for cls, row in per_class(report).items():
        status = report["classes"].get(cls, "applies to every claimed class")
        lines.append(f"| {cls} | {status} | " + " | ".join(str(row[c] or "") for c in _COLUMNS) + " |")

    failed = [c for c in report["clauses"] if c["outcome"] == "failed"]
    if failed:
        lines += ["", f"### Failed clauses ({len(failed)})", ""]
        for clause in failed[:max_failures]:
            lines += [f"#### {code(clause['id'])} ({clause['class']})", ""]
            lines += ["> " + line for line in clause["text"].splitlines()] + [""]
            for failure in clause.get("failures", [])[:2]:
                lines.append(f"- test: {code(failure['test'])}")
                for key in ("check", "expected", "observed"):
                    if failure.get(key):
                        lines.append(f"- {key}: {code(clip(failure[key], 400))}")
                if not failure.get("observed"):
                    lines.append(f"- message: {code(clip(failure['summary'], 400))}")
                if failure.get("replay"):
                    lines += ["- replay:", "", "  ```sh", f"  {failure['replay']}", "  ```"]
            lines.append("")
        if len(failed) > max_failures:
            lines += [f"… and {len(failed) - max_failures} more: see the JSON or HTML report.", ""]
    unsettled = [c for c in report["clauses"] if c["outcome"] in NOT_PASSED and c["outcome"] != "failed"]
    if unsettled:
        lines += ["", f"### Not established ({len(unsettled)})", "",
                  "Claimed clauses this run did not establish (a certification needs them too):", ""]
        for clause in unsettled[:max_failures * 2]:
            note = (clause.get("notes") or ["no test of it ran"])[0]
            lines.append(f"- {code(clause['id'])} {clause['outcome']}: {cell(clip(note, 300))}")
    waivers = report.get("waivers", {})
    rows = [(kind, w) for kind in ("expired", "applied", "stale") for w in waivers.get(kind, [])]
    if rows:
        lines += ["", "### Waivers", "", "| clause | waiver | outcome | reason | expires |", "|---|---|---|---|---|"]
        label = {"expired": "❌ expired (fails the run)", "applied": "waived",
                 "stale": "stale: the clause passes, remove the waiver"}
        for kind, w in rows:
            lines.append(f"| {code(w['clause'])} | {label[kind]} | {w.get('outcome', '')} | "
                         f"{cell(w['reason'])} | {w['expires']} |")

    env = {**{k: v for k, v in store.items() if isinstance(v, (str, int, float)) and k not in ("name",)},
           **{k: v for k, v in report["environment"].items() if v is not None}}
    lines += ["", "<details><summary>Environment and command</summary>", "",
              "| | |", "|---|---|"]
    lines += [f"| {cell(k)} | {cell(v)} |" for k, v in env.items()]
    lines += [f"| command | {code(report['run']['command'])} |", "", "</details>", ""]
    return "\n".join(lines)
