"""Recipe importer: an SGLang best-practice page (or PR) -> a config the sidecar runs as it is.

Public API
----------
``import_recipe(path_or_text, *, source=None, ttft_target=None, add_bucket_flags=False) -> ImportResult``
    ``path_or_text``: a ``Path``, a path string, or the page text itself (any string with a newline).
    ``ImportResult`` has ``.deployments`` (``list[config.Deployment]``, one per table row in table order,
    or one for a PR's launch script), ``.warnings`` (about the page as a whole: table of contents,
    section order, …; each deployment also carries its own ``warnings``), ``.source`` and ``.config()``.
    ``ttft_target`` (seconds) sets ``ttft_target_seconds`` on every deployment; the pages state none,
    so without it TTFT stays unset (the measured TTFT of a PR is only a baseline).
    ``add_bucket_flags``: for a TPOT target that is not an edge of SGLang's default TPOT/ITL buckets
    (50 ms), write ``buckets: {tpot, itl}`` with the target inserted and put the flag in
    ``launch["recommended_flags"]`` (with ``--enable-metrics``), meaning "I launch with these".
    Raises ``RecipeError`` (a ``ValueError``; message ``path:line: message``) for malformed input.
``default_config(add_bucket_flags=True) -> config.Config``
    The embedded Kimi-K2.6 Ascend A3 page (11 deployments) plus the Kimi-K3 A5 PR (1, with baseline).
``render(deployments, fmt="yaml"|"json", header=None) -> str`` and ``config_dict(deployments)``
    The ``{"deployments": [...]}`` shape that ``monitor.config.parse_config`` reads.

Modules: ``shell`` (continuations, variables, arrays, loops), ``commands`` (server/router/bench
recognition), ``table``, ``sections``, ``values`` (units, dataset labels), ``launch`` (flags the
monitor cares about, target URLs), ``buckets``, ``mapping`` (row + commands -> Deployment),
``importer`` (page vs script), ``output``, ``cli`` (``slo-monitor recipe import``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from monitor.config import Config
from monitor.recipes.errors import RecipeError
from monitor.recipes.importer import ImportResult, import_text
from monitor.recipes.mapping import Options
from monitor.recipes.output import config_dict, render

BUILTIN = ("kimi-k2.6-ascend-a3.txt", "kimi-k3-a5-pr39589.txt")

__all__ = ["BUILTIN", "ImportResult", "RecipeError", "builtin_text", "config_dict", "default_config",
           "import_recipe", "render"]


def import_recipe(
    path_or_text: str | Path,
    *,
    source: str | None = None,
    ttft_target: float | None = None,
    add_bucket_flags: bool = False,
) -> ImportResult:
    if ttft_target is not None and not ttft_target > 0:
        raise ValueError(f"--ttft-target must be a positive number of seconds, got {ttft_target!r}")
    if isinstance(path_or_text, Path) or "\n" not in path_or_text:
        path = Path(path_or_text)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such recipe file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise RecipeError(str(path), None, f"cannot read recipe: {err}") from None
        source = source or str(path)
    else:
        text = path_or_text
        source = source or "<text>"
    return import_text(text, source, Options(ttft_target=ttft_target, add_bucket_flags=add_bucket_flags))


def builtin_text(name: str) -> str:
    return (resources.files("monitor.recipes") / "data" / name).read_text(encoding="utf-8")


def default_config(add_bucket_flags: bool = True) -> Config:
    deployments = []
    for name in BUILTIN:
        deployments += import_recipe(builtin_text(name), source=name, add_bucket_flags=add_bucket_flags).deployments
    return Config(deployments=deployments)
