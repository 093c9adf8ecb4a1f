from django.apps import AppConfig
from django.db.models.signals import pre_delete


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Imported here: models (and the modules that import them) only once the apps are loaded.
        from agents import models, signals
        from workflows_app import metrics
        from workflows_app.api import routes
        from workflows_app.engine import grants
        from workflows_app.signals import execution_warnings

        # GET <prefix>/agents, served by workflows_app.api.urls (which never imports this app).
        routes.register(r"^agents/?$", "agents.api.AgentList", name="agents")
        # switchyard_agents_online in GET <prefix>/metrics (workflows_app.metrics, which never imports this app).
        metrics.register("agents", "agents.metrics.collect")
        # Every way of deleting an agent's row (the admin, a queryset's delete(), the shell)
        # sends pre_delete for each row, as a model with a receiver is never deleted in bulk.
        pre_delete.connect(signals.lose_started_operations, sender=self.get_model("Agent"),
                           dispatch_uid="agents.lose_started_operations")
        # The execution document's warnings (workflows_app.queries.warnings) of agents never seen.
        execution_warnings.connect(signals.warn_of_unknown_agents, dispatch_uid="agents.warn_of_unknown_agents")
        # Where each agent's worker runs, for the stops of granted attempts (workflows_app.engine.grants).
        grants.hosts_with(models.hosts)
