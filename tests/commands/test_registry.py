"""The CLI's command registry is explicit (cli.COMMAND_GROUPS) and complete: a command module that is written but
not registered would be a command nobody can run."""

from __future__ import annotations

import pkgutil

import monitor.commands
from monitor import cli


def test_every_command_module_is_registered_once():
    modules = {m.name for m in pkgutil.iter_modules(monitor.commands.__path__)}
    registered = [f.__module__.rsplit(".", 1)[-1] for f in cli.COMMAND_GROUPS]
    assert sorted(registered) == sorted(modules), (
        f"monitor/commands modules not in cli.COMMAND_GROUPS: {sorted(modules - set(registered))}; "
        f"registered twice: {sorted({r for r in registered if registered.count(r) > 1})}")


def test_each_registered_group_adds_its_commands_to_the_parser():
    sub = cli.build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert {"run", "status", "inspect", "demo", "emulate", "generate", "analyze"} <= set(sub.choices)
