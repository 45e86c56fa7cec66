"""The one exception type of the project: an error whose message is meant for the user."""

from __future__ import annotations


class AssocmemError(RuntimeError):
    """An error with a message meant for the user (names the file or key at fault)."""
