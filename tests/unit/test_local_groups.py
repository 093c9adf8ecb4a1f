"""What the kill's watcher asks of a process group (``agents.worker.local``): is anything of it still
running? A process that died and that its parent has not reaped yet (a zombie, as a pool process
is until its worker notices) runs nothing."""

import os
import signal
import subprocess
import sys
import time

from agents.worker import local


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
