"""The sidecar's Dockerfile, parsed offline: pinned base, non-root, `pip install .`, a CMD the CLI accepts."""

from __future__ import annotations

import fnmatch
import re

from monitor.cli import build_parser
from tests.deploy.helpers import ROOT, bind_mounts, compose, dockerfile_instructions, exec_form


def _one(instruction: str) -> str:
    found = [args for word, args in dockerfile_instructions() if word == instruction]
    assert len(found) == 1, f"expected one {instruction}, got {found}"
    return found[0]


def test_base_image_is_an_exact_python_311_slim():
    base = _one("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-bookworm)?", base), base


def test_runs_as_a_numeric_non_root_user():
    user = _one("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric, so Kubernetes runAsNonRoot can verify it
    words = [w for w, _ in dockerfile_instructions()]
    assert words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN")  # nothing runs as root after


def test_installs_the_package_and_exposes_the_sidecar_port():
    runs = " ".join(args for word, args in dockerfile_instructions() if word == "RUN")
    assert re.search(r"pip install \.(\s|$)", runs)
    assert _one("EXPOSE") == "9464"


def test_cmd_is_a_valid_run_command_on_the_mounted_config():
    cmd = exec_form(_one("CMD"))
    assert cmd[0] == "slo-monitor"
    args = build_parser().parse_args(cmd[1:])
    assert args.command == "run" and args.listen == "0.0.0.0:9464"
    mounted = {target for _, target, _ in bind_mounts(compose()["services"]["sidecar"])}
    assert args.config in mounted


def test_build_context_keeps_what_the_copy_needs():
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for word, args in dockerfile_instructions():
        if word != "COPY":
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert (ROOT / src).exists(), src
            assert not any(fnmatch.fnmatch(src, pat) for pat in ignored), f"{src} is excluded by .dockerignore"
