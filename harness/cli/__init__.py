"""The thin CLI: each command module parses options and calls the library.

One module per command (asv style). Only ``UserError`` is caught here: it becomes one
line on stderr and exit code 2 (or its own code); anything else keeps its traceback.
Heavy imports stay inside the command functions so ``bench --help`` is fast.
"""

from __future__ import annotations

import sys

import typer

from harness.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="bench: register a GO/NO-GO bar, sweep it, get a verdict — numbers you can publish.")

from harness.cli import (ceilings, compare, kernels, ledger, register, report, route, status,  # noqa: E402,F401
                        sweep, verdict, warm)  # (importing a command module registers it)


def main(argv: list[str] | None = None) -> int:
    try:
        # standalone_mode=False: click returns a command's typer.Exit code instead of exiting.
        rc = app(args=argv, standalone_mode=False)
    except UserError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("bench: interrupted — every row reported written is on disk; run the same command to resume",
              file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # click's own usage errors
        return exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:
        click_errors, aborts = _click_exception_types()
        if isinstance(exc, click_errors):  # bad usage: one line, exit 2, nothing written
            ctx = getattr(exc, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `bench --help`)"
            print(f"bench: error: {exc.format_message()}{where}", file=sys.stderr)
            return exc.exit_code
        if isinstance(exc, aborts):
            print("bench: aborted", file=sys.stderr)
            return 130
        raise
    return rc if isinstance(rc, int) else 0


def _click_exception_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """click's ClickException and Abort, from click itself and from the copy that newer
    typer vendors (typer._click): a usage error may come from either."""
    errors, aborts = [], []
    for name in ("click.exceptions", "typer._click.exceptions"):
        try:
            mod = __import__(name, fromlist=["ClickException"])
        except ImportError:
            continue
        errors += [c for c in (getattr(mod, "ClickException", None),) if c is not None]
        aborts += [c for c in (getattr(mod, "Abort", None),) if c is not None]
    return tuple(errors), tuple(aborts)


def run() -> None:
    sys.exit(main())
