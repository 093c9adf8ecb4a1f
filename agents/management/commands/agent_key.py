"""``manage.py agent_key NAME [--rotate]``: print the key of the agent ``NAME``, which its
``run_agent`` proves what it says with (``SWITCHYARD_AGENT_KEY`` or ``--key-file``). With
``--rotate``, give it a new key first: the old one proves nothing from then on."""

from django.core.management.base import BaseCommand

from agents.management.commands.run_agent import check_name
from workflows_app import signing


class Command(BaseCommand):
    help = "Print the key of the agent NAME (for SWITCHYARD_AGENT_KEY or run_agent --key-file); --rotate: a new one."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--rotate", action="store_true",
                            help="give the agent a new key first: the old one is refused from then on")

    def handle(self, *args, name, rotate, **options):
        check_name(name)
        key = signing.rotate(name) if rotate else signing.agent_key(name)
        self.stdout.write(key)
