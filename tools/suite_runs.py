"""The selftests' fixtures that run the suite in processes of their own (:mod:`tools.fresh_run`); the root
``conftest.py`` loads this module as a pytest plugin."""

from __future__ import annotations

import pytest

from tools.fresh_run import RunServers, SuiteRun


@pytest.fixture(scope="session")
def suite_run_servers(tmp_path_factory):
    """The fork servers of this process's suite runs (:class:`RunServers`)."""
    servers = RunServers(tmp_path_factory.mktemp("suite-runs"))
    yield servers
    servers.close()


@pytest.fixture
def run_suite_in(pytester, monkeypatch, suite_run_servers) -> SuiteRun:
    """Runs the suite in pytester's temporary folder, in a process of its own (:class:`SuiteRun`)."""
    return SuiteRun(pytester, monkeypatch, suite_run_servers)
