"""``manage.py resume_executions [--force] [filters] [--all] [--dry-run] [--json]``"""

from workflows_app.bulk.command import BulkActionCommand


class Command(BulkActionCommand):
    help = ("Resume every execution the filters select (those of list_executions), each as resume_execution "
            "would; executions whose status cannot be resumed are skipped. --force force-resumes.")
    action = "resume"
    stronger = {"force": ("force-resume", "force-resume: reset in-flight operations as well")}
