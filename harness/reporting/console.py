"""The one rich Console renderers print to (stdout; width fixed when not a terminal)."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)
