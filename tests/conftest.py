"""The project's own tests.  ``pytester`` runs certification sessions in
process; the harnesses of broken stores live in ``broken_stores.py``."""

pytest_plugins = ["pytester"]
