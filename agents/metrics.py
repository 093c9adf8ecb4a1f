"""The agents' series of ``GET /api/v1/metrics`` (``workflows_app.metrics``, which never imports
this app: ``AgentsConfig.ready()`` registers :func:`collect` there)."""

from prometheus_client.core import GaugeMetricFamily

from agents.models import Agent


def collect():
    yield GaugeMetricFamily("switchyard_agents_online", "Agents whose last heartbeat is more recent than "
                            "WORKFLOWS['AGENT_OFFLINE_AFTER_SECONDS'].", value=Agent.objects.online().count())
