"""e2e tests share one stack per module; a failed test is marked so its fixtures can leave the stack healthy."""

from __future__ import annotations

import pytest

FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ARG001
    outcome = yield
    if outcome.get_result().failed:
        item.stash[FAILED] = True
