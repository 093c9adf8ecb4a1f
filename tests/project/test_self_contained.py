"""The repository reads on its own: no file cites a contract document that no clone or wheel
has. Users have docs/ (docs/index.md and the pages it links); code, tests and user-visible text
say the rule itself or point there, never to the internal contract's sections or its path."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Spelled in pieces, so that this file does not find itself.
NEEDLES = ("SPEC" + " §", "SPEC" + ".md", ".." + "/shared")


def repository_files():
    """Every tracked file and every untracked one git does not ignore, as paths from the root."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = set()
    for extra in ([], ["--others", "--exclude-standard"]):
        listed = subprocess.run(["git", "ls-files", "-z", *extra], cwd=ROOT, capture_output=True, check=True)
        names.update(name for name in listed.stdout.decode().split("\0") if name)
    return sorted(names)


def text_of(path):
    """The file's text, or None for a binary file (or one listed but gone)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@pytest.mark.processes
def test_no_file_cites_the_internal_contract():
    offenders = []
    for name in repository_files():
        text = text_of(ROOT / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if any(needle in line for needle in NEEDLES):
                offenders.append(f"{name}:{number}: {line.strip()}")
    if offenders:
        pytest.fail(f"{len(offenders)} lines cite the internal contract; say the rule itself or point to docs/:\n"
                    + "\n".join(offenders), pytrace=False)
