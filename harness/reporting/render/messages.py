"""The CLI's own lines: its version on stdout; an error, an interrupt or an abort as one line
on stderr (so that an export on stdout stays clean). Imports nothing heavy: ``bench --help``
loads it."""

from __future__ import annotations

import sys


def render_version(version: str) -> None:
    print(f"bench {version}")


def render_error(message: str) -> None:
    """Bad input or bad usage: the one line naming the problem and the fix."""
    print(f"bench: error: {message}", file=sys.stderr)


def render_interrupted(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr)


def render_nothing_usable(reason: str) -> None:
    """A sweep that gave no usable number: why, as one line on stderr (its exit code is 4)."""
    print(f"bench: nothing usable: {reason}", file=sys.stderr)


def render_aborted() -> None:
    print("bench: aborted", file=sys.stderr)


def render_written_registration(line: str, waived: dict[str, str]) -> None:
    """`bench new`'s answer: where the file is, what it waives, and the two steps that register it."""
    print(f"wrote registrations/{line}.toml — review it, commit it, then: bench register registrations/{line}.toml")
    for name, why in waived.items():
        print(f"  waived canary {name} (accept_weak, commented in the file): {why}")


__all__ = ["render_aborted", "render_error", "render_interrupted", "render_nothing_usable", "render_version", "render_written_registration"]
