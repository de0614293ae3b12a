"""Generator test helpers: the small config, its generated files on disk, a tool runner (the builds: tests/components.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from monitor.config import Config, load_config
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.writer import write
from tests.conftest import REAL_FIXTURES

HERE = Path(__file__).resolve().parent
SMALL = HERE / "fixtures" / "small.yaml"
FIXTURES = REAL_FIXTURES


def run_tool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def small_config() -> Config:
    return load_config(SMALL)


@pytest.fixture(scope="session")
def small_files(small_config: Config) -> dict[str, str]:
    return generate(small_config, Options(config_name="tests/generate/fixtures/small.yaml"))


@pytest.fixture(scope="session")
def small_dir(small_files: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    write(small_files, out)
    return out


@pytest.fixture(scope="session")
def scaled_dir(small_config: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scaled")
    write(generate(small_config, Options(time_scale=60)), out)
    return out
