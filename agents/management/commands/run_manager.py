"""``manage.py run_manager``: a Celery worker on the management queue that runs dispatchers
(and operations that name no agent), the inbox that stores what agents report, the tick that
keeps every stored deadline, and the look for steps that operations' limits hold back."""

import os
import socket
import uuid

from agents.worker import inbox, manager
from agents.worker.lifecycle import Ticker, WorkerCommand, begin, run_worker
from workflows_app.conf import workflows_settings
from workflows_app.flow import gate
from workflows_app.wire import keys


class Command(WorkerCommand):
    help = "Run a manager: dispatchers of executions and operations with no agent."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, concurrency, loglevel, **options):
        queue = workflows_settings.MANAGEMENT_QUEUE
        # A manager proves what its pool processes report with the key it derives for its own
        # name: an agent's key left in the environment (run_agent's) is not its key.
        os.environ.pop(keys.KEY_ENV, None)
        # Any manager carries on every execution: nothing belongs to one process.
        manager.on_start()
        incarnation = begin(queue, register=False)
        ticker, reports = Ticker(manager.Tick(), manager.TICK_SECONDS), inbox.Inbox()
        # Steps a rate limit holds back go the moment their window lets them, not at the next tick.
        flow = Ticker(gate.drain_waiting, manager.TICK_SECONDS, name="flow")
        gate.drain_in(flow.wake)  # and a slot freed by a report the inbox stores: at once, on that thread
        run_worker(f"manager {incarnation[:8]}", queue=queue, hostname=f"manager-{uuid.uuid4().hex[:8]}@{socket.gethostname()}",
                   concurrency=concurrency, loglevel=loglevel, threads=[reports, ticker, flow], stop_first=[ticker, flow],
                   stop_last=[reports])
