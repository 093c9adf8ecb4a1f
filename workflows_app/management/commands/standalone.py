"""``manage.py standalone``: the whole local stack in one command (compare ``airflow standalone``).

Starts the embedded Redis (when no broker is configured), applies migrations, makes sure an ``admin`` user exists and prints its password, then runs the
web server (API and admin), a manager, one agent named ``local`` and Flower as child
processes, and starts the bundled ``demo`` workflow, each in its own process group.
Ctrl-C stops all of it gracefully.
"""

import secrets
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from switchyard import embedded_redis
from switchyard.supervisor import Child, Supervisor
from workflows_app import services
from workflows_app.conf import workflows_settings
from workflows_app.models import Execution
from workflows_app.states import EXECUTION_ACTIVE

PASSWORD_FILE = "standalone_admin_password.txt"


class Command(BaseCommand):
    help = "Run the whole Switchyard stack locally on embedded defaults; Ctrl-C stops it."

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--flower-port", type=int, default=5555)
        parser.add_argument("--no-flower", action="store_true", help="do not start Flower")
        parser.add_argument("--no-demo", action="store_true", help="do not start the demo workflow")
        parser.add_argument("--concurrency", type=int, default=2, help="pool size of the manager and of the agent")

    def handle(self, *args, address, port, flower_port, no_flower, no_demo, concurrency, **options):
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        # The embedded Redis belongs to the stack: stopped with it, unless it was already
        # running for someone else before this command started.
        own_redis = settings.SWITCHYARD_EMBEDDED_REDIS and not embedded_redis.ping(settings.VAR_DIR)
        if settings.SWITCHYARD_EMBEDDED_REDIS:
            embedded_redis.ensure_running(settings.VAR_DIR)
            self.stdout.write(f"embedded Redis: {settings.CELERY_BROKER_URL}")
        call_command("migrate", interactive=False, verbosity=0)
        password = self._admin_password()

        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = [
            Child("web", manage + ["runserver", "--noreload", f"{address}:{port}"]),
            Child("manager", manage + ["run_manager", f"--concurrency={concurrency}"]),
            Child("agent", manage + ["run_agent", "local", f"--concurrency={concurrency}"]),
        ]
        if not no_flower:
            children.append(Child("flower", manage + ["run_flower", f"--address={address}", f"--port={flower_port}"]))
        phases = workflows_settings.SHUTDOWN_PHASE_TIMEOUTS
        supervisor = Supervisor(children, cwd=settings.BASE_DIR, out=self.stdout,
                                grace=float(sum(phases.values())),
                                before_stop=self._abort_executions if workflows_settings.ABORT_ON_TERMINATE else None)
        supervisor.start()
        self.stdout.write(
            "\nSwitchyard is running:\n"
            f"  admin   http://{address}:{port}/admin/   user admin, password {password}\n"
            + (f"  flower  http://{address}:{flower_port}/\n" if not no_flower else "")
            + "Press Ctrl-C to stop.\n"
        )
        if not no_demo:
            execution = services.start("demo", created_by="standalone")
            self.stdout.write(f"demo workflow started: execution {execution.pk}\n"
                              f"  follow it: python manage.py tail_events {execution.pk} --follow\n")
        status = supervisor.wait()
        if own_redis:
            embedded_redis.stop(settings.VAR_DIR)
            self.stdout.write("embedded Redis stopped")
        sys.exit(status)

    def _abort_executions(self):
        """WORKFLOWS["ABORT_ON_TERMINATE"] (Cromwell's abort-jobs-on-terminate): the stack is
        going away, so its executions are killed first, while the agent can still stop their
        processes; otherwise they carry on when the stack starts again."""
        active = list(Execution.objects.filter(status__in=EXECUTION_ACTIVE).values_list("pk", flat=True))
        for pk in active:
            try:
                services.kill(pk)
            except Exception as exc:  # one execution must not keep the others from stopping
                self.stdout.write(f"could not kill execution {pk}: {exc}")
        deadline = time.monotonic() + workflows_settings.SHUTDOWN_PHASE_TIMEOUTS["stop_intake"] + workflows_settings.KILL_GRACE_SECONDS
        while time.monotonic() < deadline and Execution.objects.filter(pk__in=active, status__in=EXECUTION_ACTIVE).exists():
            time.sleep(0.2)
        self.stdout.write(f"ABORT_ON_TERMINATE: killed {len(active)} active execution(s)")

    def _admin_password(self):
        """The admin user's password: made once, kept under var/ so every start prints the same."""
        path = settings.VAR_DIR / PASSWORD_FILE
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is not None and path.exists():
            return path.read_text().strip()
        password = secrets.token_urlsafe(12)
        if user is None:
            user = User(username="admin", email="admin@localhost", is_staff=True, is_superuser=True)
        user.set_password(password)
        user.save()
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password
