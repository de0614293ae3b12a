"""Stop long-running commands (sidecar, emulator, demo) cleanly on SIGINT and SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable


def on_stop_signals(callback: Callable[[], object]) -> None:
    """Call `callback` on SIGINT/SIGTERM from the running event loop (where the platform allows it)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on every platform / loop
            loop.add_signal_handler(sig, callback)
