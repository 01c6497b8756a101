"""Loads the suite's pytest plugin (fixtures/plugin/hooks.py) for every test under this folder."""

pytest_plugins = ["fixtures.plugin.hooks"]
