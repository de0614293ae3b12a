from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def k26_path() -> Path:
    return FIXTURES / "kimi-k2.6-ascend-a3.txt"


@pytest.fixture(scope="session")
def k3_path() -> Path:
    return FIXTURES / "kimi-k3-a5-pr39589.txt"


@pytest.fixture(scope="session")
def synthetic_path() -> Path:
    return FIXTURES / "synthetic-pd.md"
