"""The project's own tests.  ``pytester`` runs certification sessions in
process; the harnesses of broken stores live in ``broken_stores.py``."""

pytest_plugins = ["pytester"]

# fixtures of the SQL tests, shared so one PostgreSQL serves the whole session
from sql_harnesses import postgres_harness, sqlite_harness  # noqa: E402, F401


def pytest_configure(config):
    config.addinivalue_line("markers", "zoo: certifies every mutant of the zoo (slow)")


def pytest_terminal_summary(terminalreporter):
    """Print (and save) the zoo's table when the zoo ran."""
    try:
        from test_zoo import ZOO_ROWS
    except ImportError:
        return
    if not ZOO_ROWS:
        return
    columns = list(ZOO_ROWS[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in ZOO_ROWS)) for c in columns}
    lines = [" | ".join(c.ljust(widths[c]) for c in columns),
             "-+-".join("-" * widths[c] for c in columns)]
    lines += [" | ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in ZOO_ROWS]
    terminalreporter.write_sep("=", "mutant zoo")
    for line in lines:
        terminalreporter.write_line(line)
    import os

    os.makedirs("cortex-reports", exist_ok=True)
    with open(os.path.join("cortex-reports", "zoo.md"), "w", encoding="utf-8") as fh:
        fh.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
        for r in ZOO_ROWS:
            fh.write("| " + " | ".join(str(r[c]) for c in columns) + " |\n")
