"""The one user-facing error type.

A ``UserError`` is bad input or a refused action: the CLI prints its message on one
line and exits 2 (or ``exit_code``). Every other exception is a bug and keeps its
traceback.
"""


class UserError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def plural(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``: counts in messages and reports."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def shown(path) -> str:
    """``path`` as a message shows it: relative to the current directory when under it."""
    from pathlib import Path

    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


__all__ = ["UserError", "plural", "shown"]
