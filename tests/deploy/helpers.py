"""Offline readers for docker-compose.yml and the Dockerfile (no Docker engine on these machines)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def substitute(text: str) -> str:
    """`${VAR:-default}` -> default, as compose resolves it with VAR unset (tests must not see the env)."""
    def repl(m: re.Match[str]) -> str:
        if m.group(2) is None:
            raise AssertionError(f"{m.group(0)} has no default; compose would substitute an empty string")
        return m.group(2)

    return _VAR.sub(repl, text)


def compose() -> dict[str, Any]:
    return yaml.safe_load(substitute(COMPOSE.read_text(encoding="utf-8")))


def compose_raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host source, container target, mode) of each bind mount; named volumes left out."""
    out = []
    for v in service.get("volumes", []):
        parts = v.split(":")
        source, target, mode = parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"
        if source.startswith((".", "/")):
            out.append((source, target, mode))
    return out


def host_path(source: str) -> Path:
    return (ROOT / source).resolve() if not source.startswith("/") else Path(source)


def repo_relative(source: str) -> str:
    return host_path(source).relative_to(ROOT).as_posix()


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    out = []
    for line in lines:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(x, str) for x in value), args
    return value
