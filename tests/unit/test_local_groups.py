"""What the kill's watcher asks of a process group (``agents.worker.local``): is anything of it still
running? A process that died and that its parent has not reaped yet (a zombie, as a pool process
is until its worker notices) runs nothing."""

import os
import signal
import subprocess
import sys
import time

import pytest

from agents.worker import local


@pytest.mark.processes
def test_a_group_whose_only_process_is_an_unreaped_zombie_is_not_running():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert local.group_running(child.pid)
        os.killpg(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while local.group_running(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert local.group_alive(child.pid), "not reaped yet: signals still reach the group"
        assert not local.group_running(child.pid), "but nothing of it runs"
    finally:
        child.kill()
        child.wait()
    assert not local.group_alive(child.pid) and not local.group_running(child.pid)


def test_an_attempt_is_recorded_even_when_its_directory_was_removed(tmp_path, monkeypatch):
    """The running directory is made when a record needs it, not looked up on every record."""
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv(local.NAME_ENV, "recorder")
    key = local.attempt_key("op", 1)
    local.mark_running(key)  # no directory yet
    assert local.process_group_of(key) == os.getpgrp()
    local.mark_done(key)
    assert local.process_group_of(key) is None
    (tmp_path / "var" / "agents" / "recorder" / "running").rmdir()  # gone while the worker runs
    local.mark_running(key)
    assert local.running_keys() == [] and local.process_group_of(key) == os.getpgrp()
    local.mark_done(key)
    local.mark_done(key)  # twice, or with no record: nothing to do
