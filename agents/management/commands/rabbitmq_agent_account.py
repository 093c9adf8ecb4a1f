"""``manage.py rabbitmq_agent_account NAME [--user USER] [--vhost VHOST]``: the ``rabbitmqctl``
commands that give the agent ``NAME`` a RabbitMQ account of its own, which may configure and read
only its own queues, publish only reports, answers to remote control and events, and declare
nothing shared (``agents.accounts``). It prints them; it changes nothing."""

import shlex

from django.core.management.base import BaseCommand, CommandError

from agents.accounts import permissions
from agents.management.commands.run_agent import check_name


class Command(BaseCommand):
    help = "Print the rabbitmqctl commands for a RabbitMQ account of the agent NAME's own."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--user", help="the account's user name (default: the agent's name)")
        parser.add_argument("--vhost", default="/")

    def handle(self, *args, name, user, vhost, **options):
        check_name(name)  # a name no agent can have would configure a queue or an exchange of everyone's
        user = user or name
        if not user or any(c.isspace() for c in user):
            raise CommandError(f"invalid user name {user!r}")
        granted = permissions(name)
        q = shlex.quote
        self.stdout.write(f"rabbitmqctl add_user {q(user)} \"$AGENT_PASSWORD\"")
        self.stdout.write(f"rabbitmqctl set_permissions -p {q(vhost)} {q(user)} "
                          f"{q(granted['configure'])} {q(granted['write'])} {q(granted['read'])}")
