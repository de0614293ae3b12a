"""The one error type of the recipe importer: `path:line: message`."""

from __future__ import annotations


class RecipeError(ValueError):
    """A recipe page that cannot be imported; the message names the file and line.

    A ValueError so that the CLI dispatcher prints it as one clean line.
    """

    def __init__(self, source: str, line: int | None, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")
