from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows_app"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from workflows_app import checks  # noqa: F401  (registers the system checks)
        from workflows_app.engine import listeners, queueing  # noqa: F401  (connect their signal receivers)
        from workflows_app.registry import load_workflow_modules

        load_workflow_modules()
