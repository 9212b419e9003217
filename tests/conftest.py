"""The project's own tests.  ``pytester`` runs certification sessions in
process; the harnesses of broken stores live in ``broken_stores.py``."""

pytest_plugins = ["pytester"]

# fixtures of the SQL tests, shared so one PostgreSQL serves the whole session
from sql_harnesses import postgres_harness, sqlite_harness  # noqa: E402, F401

# the session's failing certification, read by the report and browser tests
from failing_run import failing_report, failing_run  # noqa: E402, F401


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: certifies every mutant of the zoo (slow)")


#: the zoo's rows, gathered from the test reports (from every xdist worker)
ZOO_ROWS: list = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        ZOO_ROWS.extend(value for key, value in report.user_properties if key == "zoo")


def pytest_terminal_summary(terminalreporter):
    """Print (and save) the zoo's table when the zoo ran."""
    if not ZOO_ROWS:
        return
    import statistics

    ZOO_ROWS.sort(key=lambda r: r["mutant"])
    columns = list(ZOO_ROWS[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in ZOO_ROWS)) for c in columns}
    lines = [" | ".join(c.ljust(widths[c]) for c in columns),
             "-+-".join("-" * widths[c] for c in columns)]
    lines += [" | ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in ZOO_ROWS]
    times = [r["verdict s"] for r in ZOO_ROWS]
    rejected = sum(1 for r in ZOO_ROWS if r["rejected"])
    summary = (f"{rejected} of {len(ZOO_ROWS)} mutants rejected; time to verdict median "
               f"{statistics.median(times):.1f}s, max {max(times):.1f}s")
    terminalreporter.write_sep("=", "mutant zoo")
    for line in lines:
        terminalreporter.write_line(line)
    terminalreporter.write_line(summary)
    import os

    os.makedirs("cortex-reports", exist_ok=True)
    with open(os.path.join("cortex-reports", "zoo.md"), "w", encoding="utf-8") as fh:
        fh.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
        for r in ZOO_ROWS:
            fh.write("| " + " | ".join(str(r[c]) for c in columns) + " |\n")
        fh.write(f"\n{summary}\n")
