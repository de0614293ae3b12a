from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NPU_SMI = FIXTURES / "npu-smi"
TELEMETRY = FIXTURES / "telemetry"


def npu_smi_text(name: str) -> str:
    return (NPU_SMI / name).read_text(encoding="utf-8")


@pytest.fixture
def a3_text() -> str:
    return npu_smi_text("910_93_info_nputop-test-npusmi25.2.0_mixedprocs.txt")
