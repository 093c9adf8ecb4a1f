"""``manage.py pause_execution ID [--json]``"""

from workflows_app.management.cli import ActionCommand


class Command(ActionCommand):
    action = "pause"
    help = ("Pause a started execution: it sends nothing new (no step, no retry) until it is unpaused; what runs goes on, and its outcome, the events sent to it and its timers are kept.")
