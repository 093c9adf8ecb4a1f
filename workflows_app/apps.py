from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows_app"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models and their app registry must be ready first.
        from workflows_app import checks  # noqa: F401  (registers the system checks)
        from workflows_app import dispatch, embedded_redis
        from workflows_app.engine import children, listeners, queueing  # noqa: F401  (connect their signal receivers)
        from workflows_app.registry import load_workflow_modules

        app = dispatch.project_app()
        if app is not None:
            embedded_redis.start_with(app)
        load_workflow_modules()
