"""``GET agents`` of the REST API: the agents and whether they are online.

The agents app sits on top of ``workflows_app``, whose API never imports it: this
endpoint is registered in ``workflows_app.api.routes`` by ``AgentsConfig.ready()`` and served
under the prefix the host includes ``workflows_app.api.urls`` at, with the API's base view
(its authentication, pagination, errors...) like every other endpoint."""

from rest_framework import generics, serializers

from agents.models import Agent, AgentStatus
from workflows_app.api.base import SwitchyardView
from workflows_app.api.schema import READ_ERRORS, extend_schema
from workflows_app.api.schema import errors as error_responses
from workflows_app.api.serializers import APIModelSerializer


class AgentSerializer(APIModelSerializer):
    """A named agent (a queue) and its liveness."""

    status = serializers.ChoiceField(choices=AgentStatus.choices, source="live_status", read_only=True,
                                     help_text="online: a heartbeat within AGENT_OFFLINE_AFTER_SECONDS")
    running = serializers.IntegerField(read_only=True, min_value=0, help_text="its operations now started")

    class Meta:
        model = Agent
        fields = ("name", "status", "last_heartbeat", "hostname", "running")
        read_only_fields = fields


class AgentList(SwitchyardView, generics.ListAPIView):
    """The agents and whether they are online."""

    queryset = Agent.objects.none()  # for the schema; get_queryset computes online against now
    serializer_class = AgentSerializer
    filter_backends = ()

    def get_queryset(self):
        return Agent.objects.with_status()

    @extend_schema(operation_id="agents_list", summary="List the agents",
                   responses={200: AgentSerializer(many=True), **error_responses(*READ_ERRORS)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
