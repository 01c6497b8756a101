"""Loads the suite's pytest plugin (fixtures/plugin.py) for every test under this folder."""

pytest_plugins = ["fixtures.plugin"]
