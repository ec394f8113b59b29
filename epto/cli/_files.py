"""Checks of the files and directories a command is given, made before it
starts, so that a path that cannot work is refused in one line rather than
in a traceback once the command is running."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path


def new_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the file ``path`` cannot be created or replaced, or None when it
    can be tried."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a directory"
    parent = p.parent
    if not parent.exists():
        return f"{p}: no such directory: {parent}"
    if not parent.is_dir():
        return f"{p}: {parent} is not a directory"
    return None


def directory_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be used (or created) as a directory, or None.

    The directory itself is created when missing, as ``mkdir`` would; a
    missing parent is refused, naming it (a mistyped path is then said, not
    created), and so is a file anywhere on the path."""
    p = Path(path)
    for ancestor in (p, *p.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                return f"{p}: {ancestor} is not a directory"
            if ancestor not in (p, p.parent):
                return f"{p}: no such directory: {p.parent}"
            return None
    return f"{p}: no such directory: {p.parent}"  # a relative path of a vanished cwd


def path_problem(
    command: str,
    args: argparse.Namespace,
    *,
    new_files: Iterable[str] = (),
    directories: Iterable[str] = (),
) -> str | None:
    """``command: [option] problem`` for the first path given that cannot
    work, or None. Options are named as on the command line (``--log-dir``,
    whose ``dest`` is ``log_dir``); a positional argument by its ``dest``."""
    checks = [(name, new_file_problem) for name in new_files]
    checks += [(name, directory_problem) for name in directories]
    for name, check in checks:
        path = getattr(args, name.lstrip("-").replace("-", "_"))
        problem = check(path) if path is not None else None
        if problem is not None:
            option = f"{name} " if name.startswith("-") else ""
            return f"{command}: {option}{problem}"
    return None


def check_paths(
    command: str,
    args: argparse.Namespace,
    *,
    new_files: Iterable[str] = (),
    directories: Iterable[str] = (),
) -> None:
    """Exit (status 1) with :func:`path_problem`'s line when there is one;
    commands whose status 1 means something else print it and return 2."""
    line = path_problem(command, args, new_files=new_files, directories=directories)
    if line is not None:
        raise SystemExit(line)


def os_error_line(exc: OSError) -> str:
    """An ``OSError`` as ``path: reason``, without the ``[Errno N]``."""
    if isinstance(exc.filename, str | bytes) and exc.strerror:
        return f"{os.fsdecode(exc.filename)}: {exc.strerror}"
    return exc.strerror or str(exc)
