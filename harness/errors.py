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
