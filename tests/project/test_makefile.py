"""The Makefile's quick start: what ``make start`` runs, read with ``make -n`` (a dry run: nothing
is installed or started), and parsed with ``manage.py standalone``'s own argument parser, so that
a variable that names an option standalone no longer has fails here; and the ``make start`` lines
README and "Getting started" show, dry-run the same way. Then ``make wheel``, which the pages
tell a new user to run before the package is on the package index."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from workflows_app.management.commands.standalone import Command as Standalone

pytestmark = pytest.mark.processes  # make

ROOT = Path(__file__).resolve().parents[2]
#: The pages that show ``make start`` lines.
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
#: The Makefile's variables, and make's own: the caller's environment must not set them here.
MAKE_VARIABLES = {"PORT", "FLOWER_PORT", "ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}


def dry_run(target: str, *variables: str) -> list[str]:
    """The command lines ``make -n target variables…`` prints."""
    env = {name: value for name, value in os.environ.items() if name not in MAKE_VARIABLES}
    result = subprocess.run(["make", "-n", target, *variables], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"make -n {target} exited {result.returncode}:\n{result.stderr}"
    return result.stdout.splitlines()


def standalone_arguments(*variables: str) -> list[str]:
    """The arguments ``make start variables…`` gives ``manage.py standalone``."""
    [line] = [line for line in dry_run("start", *variables) if re.search(r"manage\.py\s+standalone\b", line)]
    words = shlex.split(line)
    return words[words.index("standalone") + 1:]


def parsed(arguments: list[str]):
    """Those arguments as standalone's parser reads them (an unknown option raises CommandError)."""
    return Standalone().create_parser("manage.py", "standalone").parse_args(arguments)


def test_make_start_passes_port_and_flower_port_to_standalone():
    options = parsed(standalone_arguments("PORT=8123", "FLOWER_PORT=5999"))
    assert (options.port, options.flower_port) == (8123, 5999)


def test_make_start_without_them_keeps_the_ports_the_pages_name():
    """8000 and 5555, the ports README and "Getting started" say the stack listens on."""
    arguments = standalone_arguments()
    assert arguments == []
    options = parsed(arguments)
    assert (options.port, options.flower_port) == (8000, 5555)


def test_make_start_args_passes_any_other_option():
    options = parsed(standalone_arguments("ARGS=--no-demo --verbose", "PORT=8124"))
    assert (options.no_demo, options.verbose, options.port) == (True, True, 8124)


def documented_make_start_lines():
    found = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            command = line.partition("#")[0].strip()
            if command.startswith("make start ") and "=" in command:
                found.append(pytest.param(shlex.split(command)[2:], id=f"{page.relative_to(ROOT)}: {command}"))
    return found


def test_the_pages_show_how_to_move_the_ports():
    assert {str(param.id).split(":")[0] for param in documented_make_start_lines()} == \
        {str(page.relative_to(ROOT)) for page in PAGES}


@pytest.mark.parametrize("variables", documented_make_start_lines())
def test_each_make_start_line_the_pages_show_gives_standalone_options_it_has(variables):
    options = parsed(standalone_arguments(*variables))
    given = dict(variable.split("=", 1) for variable in variables)
    if "PORT" in given:
        assert options.port == int(given["PORT"])
    if "FLOWER_PORT" in given:
        assert options.flower_port == int(given["FLOWER_PORT"])


def test_make_wheel_builds_the_wheel_into_dist():
    """The pages name ``dist/django_switchyard-<version>-py3-none-any.whl``: ``python -m build``
    (tests/project/test_package.py builds it and checks what is in it) writing to dist/."""
    [build] = [line for line in dry_run("wheel") if re.search(r"-m\s+build\b", line)]
    words = shlex.split(build)
    assert "--wheel" in words
    assert words[words.index("--outdir") + 1] == "dist"


def test_make_wheel_leaves_no_package_metadata_where_pytest_runs():
    """setuptools writes ``django_switchyard.egg-info`` into the checkout; left there, pytest run
    from the checkout loads Switchyard's plugin a second time and stops before any test."""
    lines = dry_run("wheel")
    build = next(i for i, line in enumerate(lines) if re.search(r"-m\s+build\b", line))
    assert any("django_switchyard.egg-info" in shlex.split(line) for line in lines[build + 1:] if line.startswith("rm "))
