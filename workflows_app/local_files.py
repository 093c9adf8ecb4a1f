"""The files Switchyard keeps on a host (under ``var/``, ``SWITCHYARD_VAR_DIR``) are its owner's
only: directories 0700, files 0600. They hold the database, the broker's messages,
logs, passwords and the project's own secret key.

Each place that creates one asks for the mode itself rather than changing the process's umask:
the umask is the whole process's, and in a host project that process is the project's web
server or a worker running operations, whose own files are none of Switchyard's business.
Only a process that is Switchyard's alone (the embedded Redis, ``run_flower``'s Flower) runs
under a umask of 0o077. What exists already keeps its mode: it is its owner's choice.

Nothing here imports Django: settings use it before Django is configured.
"""

import os
import secrets
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
#: A process's umask that leaves every file and directory it creates to its owner only.
PRIVATE_UMASK = 0o077
SECRET_KEY_NAME = "secret_key"


def private_dir(path) -> Path:
    """``path``, made if missing with every directory it creates owner-only (one ``stat`` when
    it exists: an agent asks on every operation)."""
    path = Path(path)
    missing = []
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:  # another process made it meanwhile
            pass
    return path


def private_opener(path, flags):
    """``open(path, mode, opener=private_opener)``: a file created owner-only."""
    return os.open(path, flags, FILE_MODE)


def create_private_file(path) -> Path:
    """An empty owner-only file at ``path`` unless there is one already (for a program that
    creates it with its own mode otherwise, such as SQLite's database)."""
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass
    return path


def write_private(path, text):
    """``text`` written to ``path``, a file that nobody but its owner can read at any moment."""
    with open(path, "w", opener=private_opener) as file:
        os.fchmod(file.fileno(), FILE_MODE)  # an older file of the same name keeps its mode otherwise
        file.write(text)


def secret_key(var_dir) -> str:
    """A secret key of this installation's own: random, made once under ``var_dir`` (owner-only)
    and read by every later process, so that sessions and signatures outlive a restart and
    every process of a stack on this host agrees on it."""
    path = private_dir(var_dir) / SECRET_KEY_NAME
    key = _read(path)
    if key:
        return key
    # Written whole to a file of this process's own, then linked into place: a process that
    # starts meanwhile either finds no key or the whole of one, and two that start together
    # agree on the one linked first.
    draft = path.with_name(f".{SECRET_KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    write_private(draft, secrets.token_urlsafe(50) + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return _read(path)


def _read(path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""
