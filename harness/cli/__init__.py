"""The thin CLI: each command module parses options and calls the library.

One module per command (asv style). Only ``UserError`` is caught here: it becomes one
line on stderr and exit code 2 (or its own code); anything else keeps its traceback.
Ctrl-C (SIGINT) and SIGTERM end a command the same way — its last line says that every
row reported written is on disk and gives the exact command that resumes — with the shell's
exit codes 130 and 143. Heavy imports stay inside the command functions so ``bench --help``
is fast.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from harness.errors import UserError
from harness.provenance.code import require_private_bytecode
from harness.reporting.render.console import fit_streams
from harness.reporting.render.messages import render_aborted, render_error, render_interrupted, render_version

# The shell's convention for a command ended by a signal: 128 + the signal number.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
INTERRUPTED = "interrupted — every row reported written is on disk; to resume, run: {command}"
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}



# The annotations whose values typer's coercion gives back unchanged when they already have
# that exact type (a string for ``str``, True or False for ``bool``) or are None.
PLAIN_TYPES = (str, bool)


class _Plain:
    """A plain ``str`` or ``bool`` parameter's coercion: a value of that exact type, or none, is
    returned as is, as typer's own coercion would return it; anything else goes to typer's.
    Typer builds its own on pydantic, whose import alone is a large part of a quick command's
    start-up (``bench status``), and a command line gives strings and flags."""

    def __init__(self, typers):
        self._typers = typers  # builds typer's own coercion, on first need

    def coerce(self, value, param, ctx):
        if value is None or type(value) is param.type_descriptor.annotation:
            return value
        return self._typers().coerce(value, param=param, ctx=ctx)


def _plain(param) -> bool:
    """Whether typer coerces ``param`` as a lone ``str`` or ``bool``: no parser, file or click
    type, one value."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or desc.annotation not in PLAIN_TYPES or desc.file_annotation is not None:
        return False
    info = desc.parameter_info
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return False
    return not (param.multiple or param.nargs == -1)


class _Argument(TyperArgument):
    """An argument whose help shows its name and help, not typer's ``<str>`` type label; a
    plain ``str`` or ``bool`` one coerced without pydantic (``_Plain``)."""

    def display_type_rich(self, ctx):
        return None

    def get_runtime_param(self):
        if _plain(self):
            return _Plain(super().get_runtime_param)
        return super().get_runtime_param()


class _Option(TyperOption):
    """An option whose help shows ``--name VALUE`` (a flag: ``--name`` alone), not typer's
    ``<bool>`` / ``<str>`` type labels; a plain ``str`` or ``bool`` one coerced without
    pydantic (``_Plain``)."""

    def display_type_rich(self, ctx):
        if self.is_flag or self.count:
            return None
        return self.metavar or (self.name or "value").upper()

    def get_runtime_param(self):
        if _plain(self):
            return _Plain(super().get_runtime_param)
        return super().get_runtime_param()


def _retype(param):
    if type(param) is TyperArgument:
        param.__class__ = _Argument
    elif type(param) is TyperOption:
        param.__class__ = _Option
    return param


def _plain_help(command) -> None:
    """Give every parameter of ``command`` (and of its subcommands) the plain help above:
    typer builds its commands itself, so the group re-types them once it has them, and their
    parameters when asked for them (``get_params``: the help and completion options too)."""
    if type(command) is TyperCommand:
        command.__class__ = _Command
    elif type(command) is TyperGroup:
        command.__class__ = BenchGroup
    for sub in (getattr(command, "commands", None) or {}).values():
        _plain_help(sub)


class _Command(TyperCommand):
    def get_params(self, ctx):
        return [_retype(p) for p in super().get_params(ctx)]


class BenchGroup(TyperGroup):
    """bench's command group: typer's, with plain option help (``_plain_help``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def get_params(self, ctx):
        return [_retype(p) for p in super().get_params(ctx)]


def line_ids(root: Path | None = None) -> list[str]:
    """The line ids of the repository at ``root`` (default: the one holding the working
    directory): its registrations' and ledgers' names (``_``-prefixed files are not lines)."""
    if root is None:
        from harness.provenance.git import repo_root

        try:
            root = repo_root()
        except UserError:
            return []
    names = {p.stem for p in (root / "registrations").glob("*.toml")}
    names |= {p.stem for p in (root / "ledger").glob("*.jsonl")}
    return sorted(n for n in names if not n.startswith("_"))


def complete_line(incomplete: str) -> list[str]:
    """Shell completion of a LINE argument: the repository's line ids starting with what is typed."""
    return [n for n in line_ids() if n.startswith(incomplete)]


# Shell completion: `bench --install-completion` (bash, zsh, fish, PowerShell) completes
# commands, options and, for LINE arguments, the repository's line ids (complete_line).
app = typer.Typer(cls=BenchGroup, add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings=HELP_OPTIONS,
                  help="bench: register a GO/NO-GO bar, sweep it, get a verdict — numbers you can publish.")


def _version(value: bool) -> None:
    if value:
        from harness import __version__

        render_version(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print bench's version and exit")) -> None:
    """bench: register a GO/NO-GO bar, sweep it, get a verdict — numbers you can publish."""


# Importing a command module registers it; `bench --help` lists the commands in this order,
# the workflow's: register → sweep → verdict → read the results → the tools around them.
from harness.cli import new, register, sweep, verdict, replicate, report, site, compare, route, bisect  # noqa: E402,F401,I001
from harness.cli import status, profile, ledger, kernels, ceilings, warm, probe  # noqa: E402,F401,I001


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt: whatever cleans up after an
    interrupt (locks released in ``finally``, the progress bar stopped) does so for both."""


# The signals received while a command ran. typer turns a KeyboardInterrupt into a plain
# return of 130 (no exception reaches main), so main learns of the signal from here.
_received: list[int] = []
# The arguments of the command this process runs (command_line()).
_argv: list[str] = []


def command_line() -> str:
    """The command being run, as the user can type it again: the one that resumes it."""
    import shlex

    return shlex.join(["bench", *_argv])


def interrupted_by(signum: int) -> None:
    """A command that handled a signal itself (the sweep lets its configs in flight finish
    on the first Ctrl-C) ends the way an unhandled one would: the resume line and 128 + signal."""
    _received.append(signum)


def _on_signal(signum, frame):
    _received.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _interrupt(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The interrupt behind ``exc`` (typer and click re-raise it as Exit or Abort ``from`` it)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__
    return None


def main(argv: list[str] | None = None) -> int:
    fit_streams()
    # Only the main thread may install handlers (a caller's thread keeps its own).
    on_main = threading.current_thread() is threading.main_thread()
    # A signal the parent ignores (SIGINT of a job started with `&`) stays ignored.
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)
                if on_main and signal.getsignal(s) is not signal.SIG_IGN}
    _received.clear()
    _argv[:] = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _main(argv: list[str] | None) -> int:
    try:
        # Before any command: a process that may have run a planted .pyc as bench's own code
        # (started without bench's private bytecode cache) runs none of them.
        require_private_bytecode()
        # standalone_mode=False: click returns a command's typer.Exit code instead of exiting.
        rc = app(args=argv, prog_name="bench", standalone_mode=False)
    except UserError as exc:
        if not _received:
            render_error(str(exc))
            return exc.exit_code
        return _interrupted(None)
    except BaseException as exc:
        return _interrupted(exc) if (_received or _interrupt(exc)) else _handled(exc)
    return _interrupted(None) if _received else (rc if isinstance(rc, int) else 0)


def _interrupted(exc: BaseException | None) -> int:
    """One line and the shell's exit code for the signal that ended the command."""
    render_interrupted(INTERRUPTED.format(command=command_line()))
    terminated = signal.SIGTERM in _received or isinstance(_interrupt(exc), Terminated)
    return EXIT_SIGTERM if terminated else EXIT_SIGINT


def _handled(exc: BaseException) -> int:
    """Exit code for what the command raised, after printing its one line (or re-raise a bug)."""
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, SystemExit):  # click's own usage errors
        return exc.code if isinstance(exc.code, int) else 2
    if not isinstance(exc, Exception):
        raise exc
    click_errors, aborts = _click_exception_types()
    if isinstance(exc, click_errors):  # bad usage: one line, exit 2, nothing written
        message = exc.format_message()
        if not message:  # a bare `bench` or `bench ledger`: click printed the help, nothing went wrong
            return 0
        ctx = getattr(exc, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `bench --help`)"
        render_error(f"{message}{where}")
        return exc.exit_code
    if isinstance(exc, aborts):
        render_aborted()
        return EXIT_SIGINT
    raise exc


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
