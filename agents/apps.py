from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # GET <prefix>/agents, served by workflows_app.api.urls (which never imports this app).
        from workflows_app.api import routes

        routes.register(r"^agents/?$", "agents.api.AgentList", name="agents")
