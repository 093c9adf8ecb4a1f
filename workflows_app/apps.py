from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows_app"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here, not at the top: models and their app registry must be ready first.
        from workflows_app import checks  # noqa: F401  (registers the system checks)
        from workflows_app import broker, db, embedded_redis, task_runs, tasks_framework, transitions
        from workflows_app.engine import progress, reactions
        from workflows_app.flow import gate, waiting
        from workflows_app.signals import execution_warnings
        from workflows_app.registry import load_workflow_modules

        # Before anything of Switchyard's connects: SQLite set up for several writing processes.
        db.configure_sqlite()
        # What follows every committed execution transition: the engine's reactions, in order.
        transitions.react_with(reactions.after_execution_transition)
        # An attempt that ends frees a slot of its operation's concurrency: the next waiting step goes.
        transitions.free_slots_with(gate.slot_freed)
        progress.hold_with(gate.hold)  # a step whose operation has a limit goes when the limit allows
        execution_warnings.connect(waiting.warn, dispatch_uid="workflows_app.flow.waiting")
        app = broker.project_app()
        if app is not None:
            embedded_redis.start_with(app)
        # A module that cannot be imported is reported by the system check workflows.E005, not
        # raised here, where it would stop every command (check and migrate too) with a traceback.
        load_workflow_modules()
        # TASKS names Switchyard's backend: the workflow and the operation that run its tasks.
        if task_runs.configured() and tasks_framework.AVAILABLE:
            task_runs.register()
