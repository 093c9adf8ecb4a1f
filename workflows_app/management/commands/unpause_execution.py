"""``manage.py unpause_execution ID [--json]``"""

from workflows_app.management.cli import ActionCommand


class Command(ActionCommand):
    action = "unpause"
    help = ("Unpause a paused execution: it carries on with the outcomes, events and timers that came meanwhile.")
