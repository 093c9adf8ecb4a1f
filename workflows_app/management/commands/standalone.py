"""``manage.py standalone``: the whole local stack in one command (compare ``airflow standalone``).

Starts the embedded Redis (when no broker is configured), applies migrations, makes sure an
``admin`` user exists, then runs the web server (API and admin), a manager, one agent named
``local`` and Flower as child processes, each in its own process group, and starts the bundled
``demo`` workflow. The terminal shows what a person needs: the URLs, the admin password and
Flower's login, the demo's progress and result, and the children's warnings and errors; each
child's whole output goes to ``var/logs/<name>.log`` (``--verbose`` shows it on the terminal
too). Ctrl-C or SIGTERM stops all of it gracefully. The children are the same ``manage.py``'s
commands, so it runs in any project that has Switchyard's apps. What it keeps under ``var/``
(passwords, logs) is its owner's only.
"""

import json
import os
import secrets
import shutil
import sys
import time

from celery import current_app
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError
from django.urls import NoReverseMatch, reverse

from workflows_app import embedded_redis, local_files, services
from workflows_app.conf import STANDALONE_FLOWER_URL_ENV, var_dir, workflows_settings
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.management.cli import done_of_total
from workflows_app.management.commands.run_flower import BASIC_AUTH_ENV
from workflows_app.management.supervisor import Child, Supervisor
from workflows_app.models import Execution
from workflows_app.queries import operations_summary
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL, ExecutionStatus, OperationState

def _manage_py():
    """How to run this manage.py again from the current directory: ``python manage.py`` when that
    ``python`` is the one running now (an activated virtualenv), else this interpreter's path
    (``make start`` runs ``.venv/bin/python`` without activating anything)."""
    on_path = shutil.which("python")
    if on_path and os.path.abspath(on_path) == os.path.abspath(sys.executable):
        python = "python"
    else:
        relative = os.path.relpath(sys.executable)
        python = sys.executable if relative.startswith("..") else relative
    return f"{python} {os.path.relpath(os.path.abspath(sys.argv[0]))}"


PASSWORD_FILE = "standalone_admin_password.txt"
#: Flower's login (``user:password``), made once like the admin's password.
FLOWER_LOGIN_FILE = "standalone_flower_login.txt"
LOG_DIR = "logs"
#: How often the demo's progress is read (two short queries), while it runs.
PROGRESS_POLL_SECONDS = 0.5


class Command(BaseCommand):
    help = "Run the whole Switchyard stack locally on embedded defaults; Ctrl-C stops it."

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--flower-port", type=int, default=5555)
        parser.add_argument("--no-flower", action="store_true", help="do not start Flower")
        parser.add_argument("--no-demo", action="store_true", help="do not start the demo workflow")
        parser.add_argument("--concurrency", type=int, default=2, help="pool size of the manager and of the agent")
        parser.add_argument("--verbose", action="store_true",
                            help="show every line the processes write, not only their warnings and errors "
                                 "(it all goes to var/logs/<process>.log either way)")

    def handle(self, *args, address, port, flower_port, no_flower, no_demo, concurrency, verbose, **options):
        local_files.private_dir(var_dir())
        # The embedded Redis belongs to the stack: stopped with it, unless it was already
        # running for someone else before this command started. (Configuring the Celery app
        # starts it, ``workflows_app.apps``: whether this process did is what tells.)
        redis_dir = embedded_redis.var_dir_of(current_app.conf.broker_url or "")
        try:
            status = self._run(address, port, flower_port, no_flower, no_demo, concurrency, verbose, redis_dir)
        finally:
            if redis_dir is not None and embedded_redis.started_here(redis_dir):
                # Every process that used it has exited: its own exit, a second later, is not waited for.
                embedded_redis.stop(redis_dir, wait=False)
                self.say("embedded Redis stopped")
        sys.exit(status)

    def _run(self, address, port, flower_port, no_flower, no_demo, concurrency, verbose, redis_dir):
        if redis_dir is not None:
            self.say(f"embedded Redis: {embedded_redis.ensure_running(redis_dir)}")
        call_command("migrate", interactive=False, verbosity=0)
        password = self._admin_password()
        flower_login = None if no_flower else self._flower_login()
        phases = workflows_settings.SHUTDOWN_PHASE_TIMEOUTS
        supervisor = Supervisor(self._children(address, port, flower_port, flower_login, concurrency),
                                log_dir=var_dir() / LOG_DIR, cwd=os.getcwd(), out=self.stdout,
                                verbose=verbose, grace=float(sum(phases.values())),
                                before_stop=self._abort_executions if workflows_settings.ABORT_ON_TERMINATE else None)
        supervisor.start()
        try:
            self._banner(address, port, None if no_flower else flower_port, password, flower_login, verbose)
            progress = None if no_demo else self._start_demo(address, port)
            return supervisor.wait(on_tick=progress)
        finally:
            supervisor.stop()  # already done unless something above raised

    def say(self, text):
        """A line on the terminal, at once: it may be a pipe (``make start | tee``), where
        Python would otherwise hold it back."""
        self.stdout.write(text)
        self.stdout.flush()

    def _children(self, address, port, flower_port, flower_login, concurrency):
        """The stack's processes; Flower (unless ``flower_login`` is None) with that login."""
        manage = [sys.executable, os.path.abspath(sys.argv[0])]  # this very manage.py
        no_flower = flower_login is None
        web_env = {} if no_flower else self._linking_to_flower(f"http://{address}:{flower_port}")
        children = [
            Child("web", manage + ["runserver", "--noreload", f"{address}:{port}"], env=web_env),
            Child("manager", manage + ["run_manager", f"--concurrency={concurrency}"]),
            Child("agent", manage + ["run_agent", "local", f"--concurrency={concurrency}"]),
        ]
        if not no_flower:
            # In its environment, where Flower reads it, rather than on a command line anyone can list.
            children.append(Child("flower", manage + ["run_flower", f"--address={address}", f"--port={flower_port}"],
                                  env={BASIC_AUTH_ENV: flower_login}))
        return children

    @staticmethod
    def _linking_to_flower(url):
        """The web server's environment for an admin that links to this stack's Flower, unless
        WORKFLOWS already names a Flower of its own: a variable the apps read in any project
        (workflows_app.conf), where SWITCHYARD_WORKFLOWS would reach only the settings that read it."""
        if workflows_settings.FLOWER_URL:
            return {}
        return {STANDALONE_FLOWER_URL_ENV: url}

    def _banner(self, address, port, flower_port, password, flower_login, verbose):
        base = f"http://{address}:{port}"
        lines = [
            "",
            "Switchyard is running:",
            f"  admin     {base}{_path('admin:index')}   user admin, password {password}",
            f"  API docs  {base}{_path('api:docs')}",
        ]
        if flower_port is not None:
            if os.environ.get(BASIC_AUTH_ENV):
                login = f"the login of {BASIC_AUTH_ENV}"
            else:
                user, _, flower_password = flower_login.partition(":")
                login = f"user {user}, password {flower_password}"
            lines.append(f"  Flower    http://{address}:{flower_port}/   {login}")
        lines.append(f"  logs      {var_dir() / LOG_DIR}/<process>.log"
                     + ("" if verbose else " (only their warnings and errors here; all of it with --verbose)"))
        lines.append("Press Ctrl-C to stop.")
        self.say("\n".join(lines) + "\n")

    def _start_demo(self, address, port):
        """Starts the bundled ``demo`` workflow; returns what shows its progress, or None when
        it cannot be started (another SWITCHYARD_WORKFLOW_MODULES may not have it)."""
        try:
            execution = services.start("demo", created_by="standalone")
        except (RegistrationError, ParameterError) as exc:
            self.say(f"demo workflow not started: {exc}")
            return None
        self.say(f"demo workflow started: execution {execution.pk}")
        try:
            self.say(f"  watch it: http://{address}:{port}"
                     + reverse("admin:workflows_app_execution_change", args=[execution.pk]))
        except NoReverseMatch:
            pass
        self.say(f"  follow it: {_manage_py()} tail_events {execution.pk} --follow")
        return DemoProgress(execution.pk, self.say)

    def _abort_executions(self):
        """WORKFLOWS["ABORT_ON_TERMINATE"] (Cromwell's abort-jobs-on-terminate): the stack is
        going away, so its executions are killed first, while the agent can still stop their
        processes; otherwise they carry on when the stack starts again."""
        active = list(Execution.objects.filter(status__in=EXECUTION_ACTIVE).values_list("pk", flat=True))
        for pk in active:
            try:
                services.kill(pk)
            except Exception as exc:  # one execution must not keep the others from stopping
                self.say(f"could not kill execution {pk}: {exc}")
        deadline = time.monotonic() + workflows_settings.SHUTDOWN_PHASE_TIMEOUTS["stop_intake"] + workflows_settings.KILL_GRACE_SECONDS
        while time.monotonic() < deadline and Execution.objects.filter(pk__in=active, status__in=EXECUTION_ACTIVE).exists():
            time.sleep(0.2)
        self.say(f"ABORT_ON_TERMINATE: killed {len(active)} active execution(s)")

    def _admin_password(self):
        """The admin user's password: made once, kept under var/ so every start prints the same."""
        path = var_dir() / PASSWORD_FILE
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is not None and path.exists():
            return path.read_text().strip()
        password = secrets.token_urlsafe(12)
        if user is None:
            user = User(username="admin", email="admin@localhost", is_staff=True, is_superuser=True)
        user.set_password(password)
        user.save()
        local_files.write_private(path, password + "\n")
        return password

    @staticmethod
    def _flower_login():
        """Flower's ``user:password``: the environment's ``FLOWER_BASIC_AUTH`` when set, else one
        made once and kept under var/ (owner-only), so every start prints the same."""
        if os.environ.get(BASIC_AUTH_ENV):
            return os.environ[BASIC_AUTH_ENV]
        path = var_dir() / FLOWER_LOGIN_FILE
        if path.exists() and ":" in path.read_text():
            return path.read_text().strip()
        login = f"flower:{secrets.token_urlsafe(12)}"
        local_files.write_private(path, login + "\n")
        return login


class DemoProgress:
    """Shows one execution's progress: a line whenever its status or its count of finished
    operations changes (``demo: 3/5 operations done``), then its end and result. Called on
    every turn of the supervisor's wait loop; it reads the database at most every
    PROGRESS_POLL_SECONDS (two queries), and not at all once the execution ended."""

    def __init__(self, execution_id, say, name="demo"):
        self.execution_id = execution_id
        self.say = say
        self.name = name
        self.ended = False
        self._next_poll = 0.0
        self._last_line = None
        self._last_error = None

    def __call__(self):
        if self.ended or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + PROGRESS_POLL_SECONDS
        try:
            row = progress(self.execution_id)
        except DatabaseError as exc:  # a busy database must not stop the stack; say it once
            if str(exc) != self._last_error:
                self._last_error = str(exc)
                self.say(f"{self.name}: could not read its progress: {exc}")
            return
        except Execution.DoesNotExist:  # deleted meanwhile (the admin, another command)
            self.ended = True
            self.say(f"{self.name}: its execution {self.execution_id} is gone")
            return
        self._show(row)

    def _show(self, row):
        counts = f"{row['done']}/{row['total']} operations done" + (f" ({row['failed']} failed)" if row["failed"] else "")
        status = row["status"]
        shown_apart = status == ExecutionStatus.STARTED or status in EXECUTION_TERMINAL  # the end has its own line
        line = f"{self.name}: {counts}" if shown_apart else f"{self.name}: {status}, {counts}"
        if row["total"] and line != self._last_line:
            self.say(line)
        self._last_line = line
        if status in EXECUTION_TERMINAL:
            self.ended = True
            self.say(self._outcome(row))

    def _outcome(self, row):
        took = f" in {(row['ended_at'] - row['started_at']).total_seconds():.1f}s" if row["started_at"] and row["ended_at"] else ""
        if row["status"] == ExecutionStatus.COMPLETED:
            return f"{self.name}: completed{took}, result {json.dumps(row['payload'])}"
        error = (row["error"] or "").strip().splitlines()
        return f"{self.name}: {row['status']}{took}" + (f": {error[0]}" if error else "")


def progress(execution_id):
    """An execution's status, payload, error and counts of its operations (all, finished,
    failed): the execution's row and the commands' count per state (two queries)."""
    row = Execution.objects.filter(pk=execution_id).values("status", "payload", "error", "started_at", "ended_at").get()
    summary = operations_summary(execution_id)
    done, total = done_of_total(summary)
    return {**row, "total": total, "done": done, "failed": summary[OperationState.FAILED]}


def _path(name) -> str:
    """Where the project serves the named page (its own URL prefixes), or a note that it does not."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return f" (not served: no URL named {name!r})"
