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

from harness.cli import ceilings, kernels, ledger, register, sweep, verdict  # noqa: E402,F401  (registers commands)


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
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            print("bench: aborted", file=sys.stderr)
            return 130
        raise
    return rc if isinstance(rc, int) else 0


def run() -> None:
    sys.exit(main())
