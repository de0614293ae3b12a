"""The interop tests read the generator's small config (tests/generate/fixtures/small.yaml)."""

from tests.generate.conftest import small_config  # noqa: F401 - a fixture, re-exported for this package
