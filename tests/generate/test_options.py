from __future__ import annotations

import pytest

from monitor.generate.options import Options, format_ms


def test_time_scale_divides_windows_into_exact_durations():
    opts = Options(time_scale=60)
    assert opts.duration("5m") == "5s" and opts.duration("3d") == "72m" and opts.duration("30d") == "12h"
    assert Options(time_scale=7).duration("5m") == "42857ms"
    assert format_ms(1500) == "1500ms"
    with pytest.raises(ValueError):
        Options(time_scale=0.5)
