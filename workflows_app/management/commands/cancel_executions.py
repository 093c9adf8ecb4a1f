"""``manage.py cancel_executions [--force | --kill] [filters] [--all] [--dry-run] [--json]``"""

from workflows_app.bulk.command import BulkActionCommand


class Command(BulkActionCommand):
    help = ("Cancel every execution the filters select (those of list_executions), each as cancel_execution "
            "would; executions whose status cannot be cancelled are skipped. --force force-cancels, --kill kills.")
    action = "cancel"
    stronger = {"force": ("force-cancel", "force-cancel: do not wait for running operations"),
                "kill": ("kill", "kill the processes of running operations")}
