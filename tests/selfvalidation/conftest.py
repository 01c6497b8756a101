"""Fixtures of the self-tests."""

import pytest

from tests.selfvalidation.junit import SuiteRun, suite_env


@pytest.fixture
def run_suite_in(pytester, monkeypatch) -> SuiteRun:
    """Runs the suite in pytester's temporary folder (see :class:`SuiteRun`)."""
    suite_env(monkeypatch)
    return SuiteRun(pytester)
