"""Loads the suite's pytest plugin (fixtures/plugin/hooks.py) for every test under this folder, and the selftests'
fixtures that run the suite in processes of their own (tools/suite_runs.py)."""

pytest_plugins = ["fixtures.plugin.hooks", "tools.suite_runs"]
