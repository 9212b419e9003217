"""Example backends used by the README and the project's own tests."""
