"""``manage.py pause_executions [filters] [--all] [--dry-run] [--json]``"""

from workflows_app.bulk.command import BulkActionCommand


class Command(BulkActionCommand):
    help = ("Pause every execution the filters select (those of list_executions), each as pause_execution "
            "would; executions that are not started are skipped.")
    action = "pause"
