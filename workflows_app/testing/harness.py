"""The test harness: a whole deployment — the managers and the agents — played in the test's own
process, on the test's database, with a clock of its own.

What the engine would send to the broker comes here instead (``workflows_app.broker.diverted``)
and is run in order, in this thread: an advance is a pass of the dispatcher, an operation's
attempt runs through the agents' own operation task on a line that hands its claim and its
reports to the managers' intake at once (``agents.worker.link.through``). So a workflow runs
under the engine's own rules — fencing, retries, failure modes, stored waits — and what a test
reads afterwards is what the database holds.

Time is the harness' :class:`Clock` (``workflows_app.clock.using``). When nothing is left to run
and a stored deadline lies ahead (a durable sleep, a retry's back-off, an event wait's timeout,
an execution's timeout), :meth:`Harness.run` moves the clock there at once and runs what fell
due; :meth:`Harness.start` leaves the clock where it is, for the test to move
(:meth:`Harness.advance`).

Every step runs inside the test's transaction when there is one (pytest-django's ``db``): what
the engine defers until a commit (``transaction.on_commit``) runs when its step ends.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from celery.exceptions import Reject, Retry
from django.test import TestCase
from django.utils import timezone

from agents import intake
from agents.models import Agent
from agents.runner import AttemptFailed, run_operation
from agents.worker import link, local
from agents.worker.inbox import Inbox
from workflows_app import broker, clock, services, signing, wire
from workflows_app.conf import VAR_DIR_ENV
from workflows_app.engine import dispatcher, history, replaycheck, tick
from workflows_app.models import Event, Execution, Operation
from workflows_app.registry import get_operation, operation_name, workflow_modules, workflow_name
from workflows_app.wire import keys
from workflows_app.states import EXECUTION_TERMINAL, OPERATION_IN_FLIGHT, OPERATION_TERMINAL

#: The most messages one call runs before it gives up on a workflow that never settles (a loop
#: that sleeps forever, say).
MAX_STEPS = 100_000
#: The incarnation of the agents the harness plays.
INCARNATION = "test-harness"
#: How long the harness waits for a real agent's next report (or its registration) before it
#: gives up on it.
AGENT_SILENCE_SECONDS = 60.0
#: How long a real agent has to stop after SIGTERM before it is killed.
AGENT_STOP_SECONDS = 15.0


class HarnessError(AssertionError):
    """The harness cannot do what the test asked: a workflow that never settles, one that waits
    for something only the test can give, an operation's claim it could not answer."""


class Clock:
    """The test's time: it starts at the wall clock's time and moves only when told — but for a
    microsecond each time it is read, as real time would, so that what is stored one after the
    other keeps its order (the oldest queued execution of a deployment starts first)."""

    TICK = timedelta(microseconds=1)

    def __init__(self, start=None):
        self._now = start or timezone.now()

    def now(self):
        """The time, one tick after the last reading (what the engine reads)."""
        self._now += self.TICK
        return self._now

    def current(self):
        """The time, without moving it (what the harness reads to decide)."""
        return self._now

    def move_to(self, moment):
        """On to ``moment``; a moment that has passed already leaves the clock where it is."""
        self._now = max(self._now, moment)


@dataclass
class Fake:
    """A registered operation's stand-in (:meth:`Harness.fake`): its first ``times`` calls raise
    ``raises`` (every call when ``times`` is None), the others return ``returns``. ``calls`` lists
    the arguments of each call, ``(args, kwargs)``."""

    returns: object = None
    raises: BaseException | None = None
    times: int | None = None
    calls: list = field(default_factory=list)

    def __call__(self, ctx, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.raises is not None and (self.times is None or len(self.calls) <= self.times):
            raise self.raises
        return json.loads(json.dumps(self.returns))  # a fresh copy: a caller may change what it got


class Result:
    """What a workflow run left in the database: its execution, its operations by step name, its
    events in order. :meth:`refresh` reads them again."""

    def __init__(self, execution_id):
        self.id = execution_id
        self.refresh()

    def refresh(self):
        self.execution = Execution.objects.get(pk=self.id)
        self.operations = {operation.name: operation for operation in
                           Operation.objects.filter(execution_id=self.id).order_by("pending_at", "name")}
        self.events = list(Event.objects.filter(execution_id=self.id).order_by("id"))
        return self

    @property
    def status(self):
        return self.execution.status

    @property
    def payload(self):
        return self.execution.payload

    @property
    def error(self):
        return self.execution.error

    def result(self, step):
        """The stored result of ``step`` (a ``HarnessError`` if it has no such step)."""
        try:
            return self.operations[step].result
        except KeyError:
            raise HarnessError(f"execution {self.id} has no step {step!r}; it has {sorted(self.operations)}") from None

    def event_types(self):
        return [event.type for event in self.events]

    def __repr__(self):
        return f"<Result {self.execution.workflow_id} {self.id} {self.status}>"


class Harness:
    """Runs workflows in this process. Use it as a context manager (the ``switchyard`` fixture
    does): inside, the engine's messages, its clock and the agents' line are the harness'.
    ``start``: the clock's first time (an aware datetime; default: now)."""

    def __init__(self, *, start=None):
        self.clock = Clock(start)
        self._advances = deque()
        self._attempts = deque()
        self._fakes = {}
        self._stack = None
        self._var_dir = None
        self._outer_environment = {}
        #: Agents run for real (:meth:`agent`): name → process; and their attempts in flight.
        self._agents = {}
        self._remote = set()

    # --- the context -------------------------------------------------------------------------
    def __enter__(self):
        self._outer_environment = dict(os.environ)
        stack = ExitStack()
        try:
            stack.enter_context(broker.diverted(_Outlet(self)))
            stack.enter_context(clock.using(self.clock.now))
            stack.enter_context(link.through(_Line(self)))
            self._var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="switchyard-harness-"))
            stack.enter_context(_environment({local.INCARNATION_ENV: INCARNATION, VAR_DIR_ENV: self._var_dir}))
            stack.callback(self._restore_fakes)
            stack.callback(self._stop_agents)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, *exc_info):
        stack, self._stack = self._stack, None
        stack.close()

    # --- what a test does --------------------------------------------------------------------
    def start(self, workflow, parameters=None, **options) -> Result:
        """Start ``workflow`` (its function or its name) with ``parameters`` (``options`` as
        ``services.start`` takes them: ``failure_mode``, ``timeout``, ``deployment_id``...) and
        run it until it waits for time to pass or for the test (an event). The clock stays."""
        execution = self._step(lambda: services.start(workflow_name(workflow), parameters or {}, **options))
        self._run_queued()
        return Result(execution.pk)

    def enqueue(self, task, *args, **kwargs) -> Result:
        """Enqueue ``task`` — a task of Django's Tasks framework whose backend is Switchyard's —
        with ``args`` and ``kwargs`` and run its execution until it waits (a retry's back-off, a
        ``run_after``) or ends. ``task.get_result(result.id)`` reads its ``TaskResult``."""
        enqueued = self._step(lambda: task.enqueue(*args, **kwargs))
        self._run_queued()
        return Result(enqueued.id)

    def run(self, workflow, parameters=None, **options) -> Result:
        """Start ``workflow`` and run it to its end, moving the clock past every deadline at once.
        ``HarnessError`` if it cannot end without the test (it waits for an event with no timeout)."""
        result = self.start(workflow, parameters, **options)
        return self.finish(result)

    def finish(self, result) -> Result:
        """Run ``result``'s execution to its end, moving the clock past every deadline at once."""
        self._run_queued()
        for _ in range(MAX_STEPS):
            if self._ended(result.id):
                return result.refresh()
            if not self._go_on():
                raise HarnessError(f"execution {result.id} cannot end: it waits for something only the test can give "
                                   f"(an event?); its open steps: {self._open_steps(result.id)}")
        raise HarnessError(f"execution {result.id} did not end within {MAX_STEPS} deadlines")

    def rerun(self, result, from_step, parameters=None, **options) -> Result:
        """Run ``result``'s execution again from its step ``from_step`` (``services.rerun``: the
        other steps that succeeded keep their results) and the new execution to its end."""
        execution = self._step(lambda: services.rerun(result.id, from_step, parameters, **options))
        return self.finish(Result(execution.pk))

    def send_event(self, result, name, payload=None) -> Result:
        """Deliver the event ``name`` to ``result``'s execution and run what it wakes."""
        self._step(lambda: services.send_event(result.id, name, payload))
        self._run_queued()
        return result.refresh()

    def cancel(self, result) -> Result:
        """Cancel ``result``'s execution and run what follows."""
        self._step(lambda: services.cancel(result.id))
        self._run_queued()
        return result.refresh()

    def advance(self, seconds=0.0, **delta) -> None:
        """Move the clock on by ``seconds`` (and any of ``timedelta``'s keywords: ``hours=1``),
        running everything that falls due on the way, in order."""
        step = timedelta(seconds=seconds, **delta)
        if step < timedelta(0):
            raise ValueError("the test clock does not go back")
        target = self.clock.current() + step
        self._run_queued()
        for _ in range(MAX_STEPS):
            if not self._go_on(until=target):
                break
        self.clock.move_to(target)
        self._run_due()

    def fake(self, operation, *, returns=None, raises=None, times=None) -> Fake:
        """Replace the registered operation ``operation`` (its function or its name) while the
        harness runs: it returns ``returns``; with ``raises``, it raises that exception instead —
        on every call, or on the first ``times`` calls and returns ``returns`` after (a failure
        that a retry gets past). The operation keeps its own retry policy."""
        if times is not None and (raises is None or isinstance(times, bool) or not isinstance(times, int) or times < 1):
            raise ValueError("times is the number of calls that raise (1 or more), with raises")
        if raises is not None and not isinstance(raises, BaseException):
            raise TypeError(f"raises is an exception instance, not {raises!r}")
        json.dumps(returns)  # a fake returns JSON, as an operation must
        definition = get_operation(operation_name(operation))
        self._fakes.setdefault(definition, definition.func)
        stand_in = Fake(returns=returns, raises=raises, times=times)
        definition.func = stand_in
        return stand_in

    def export(self, result) -> dict:
        """The history of ``result``'s execution, as ``manage.py export_execution`` writes it."""
        return json.loads(json.dumps(history.export(result.id)))

    def replay_check(self, *histories):
        """Check today's workflow code against each history — a document (:meth:`export`'s, or
        a file's parsed JSON) or the path of a file ``manage.py export_execution`` wrote — as
        ``manage.py replay_check`` does, changing nothing: ``HarnessError`` naming every history
        that does not replay, and why."""
        failures = []
        for number, found in enumerate(histories, 1):
            where = str(found) if isinstance(found, (str, os.PathLike)) else f"history {number}"
            if isinstance(found, (str, os.PathLike)):
                with open(found, encoding="utf-8") as file:
                    found = json.load(file)
            verdict = self._step(lambda: replaycheck.check(found))
            if verdict is not None:
                failures.append(f"{where}: {verdict}")
        if failures:
            raise HarnessError(f"{len(failures)} of {len(histories)} histories do not replay with today's code:\n"
                               + "\n".join(failures))

    def agent(self, name):
        """Run the operations of agent ``name`` on a real agent from now on: ``manage.py run_agent
        name`` in a process of its own, with this project's settings, on the configured broker
        (stopped with the harness). It needs nothing but the broker: the harness takes its claims
        and reports in, in the test's transaction. Fakes do not reach it. The messages waiting in
        the agent's queue are dropped first. Returns once it has registered. The broker must not be shared with a running manager of the same
        ``MANAGEMENT_QUEUE``, which would take the agent's reports."""
        if name in self._agents:
            raise ValueError(f"agent {name!r} runs already")
        broker.declare_reports_queue()
        # What an earlier run left in the agent's queue (a test killed midway) would hold the new
        # agent: its claims name operations of another test's database, and nobody answers them.
        broker.purge(name)
        log_path = os.path.join(self._var_dir, f"agent-{name}.log")
        # The environment the test had, not the one the harness gives the agents it plays: its
        # own var directory (and, on embedded defaults, the embedded Redis found there).
        env = {key: value for key, value in self._outer_environment.items()
               if key not in (local.NAME_ENV, local.INCARNATION_ENV)}
        env.update({keys.KEY_ENV: signing.agent_key(name), "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),
                    "SWITCHYARD_WORKFLOW_MODULES": ",".join(workflow_modules()), "PYTHONUNBUFFERED": "1"})
        with open(log_path, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "django", "run_agent", name, "--concurrency", "1",
                                        "--loglevel", "INFO"], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self._agents[name] = (process, log_path)
        self._wait_for_reports(lambda: Agent.objects.filter(name=name).exists(), f"agent {name} to register")

    # --- the loop ----------------------------------------------------------------------------
    def _run_queued(self):
        for _ in range(MAX_STEPS):
            if self._advances:
                execution_id = self._advances.popleft()
                self._pass(execution_id)
            elif self._attempts:
                self._deliver(*self._attempts.popleft())
            elif self._remote_in_flight():
                self._wait_for_reports(lambda: self._advances or not self._remote_in_flight(),
                                       f"the outcome of {sorted(self._remote)} from a real agent")
            else:
                return
        raise HarnessError(f"the workflow did not settle within {MAX_STEPS} messages")

    def _remote_in_flight(self):
        if self._remote:
            running = set(Operation.objects.filter(pk__in=[pk for pk, _ in self._remote], state__in=OPERATION_IN_FLIGHT)
                          .values_list("pk", "attempt"))
            self._remote = {(pk, attempt) for pk, attempt in self._remote if (uuid.UUID(pk), attempt) in running}
        return bool(self._remote)

    def _wait_for_reports(self, done, what):
        """Take the real agents' reports in (as a manager's inbox does) until ``done()``."""
        deadline = time.monotonic() + AGENT_SILENCE_SECONDS
        while not done():
            for name, (process, log_path) in self._agents.items():
                if process.poll() is not None:
                    raise HarnessError(f"agent {name} exited ({process.returncode}) while the harness waited for {what}:\n"
                                       + _tail(log_path))
            if time.monotonic() > deadline:
                raise HarnessError(f"no report within {AGENT_SILENCE_SECONDS:g}s while waiting for {what}:\n"
                                   + "\n".join(_tail(log) for _, log in self._agents.values()))
            Inbox(take=self._take_reports).drain(1.0)

    def _take_reports(self, bodies):
        """The real agents' reports into the intake, in the test's transaction; a claim it leaves
        unanswered — of an operation this test's database does not hold, left in the broker by an
        earlier run — is answered "drop", or it would hold its agent until its claim's timeout."""
        answers = self._step(lambda: intake.take(bodies))
        answered = {answer.get("id") for _, answer in answers}
        for body in bodies:
            if (isinstance(body, dict) and body.get("kind") == wire.Kind.CLAIM and body.get("id") not in answered
                    and isinstance(body.get("reply_to"), str) and isinstance(body.get("agent"), str)):
                answer = {"id": body.get("id"), "verdict": wire.Verdict.DROP, "reason": "not an operation of this test"}
                answer["proof"] = keys.prove(signing.agent_key(body["agent"]), keys.Purpose.ANSWER, answer)
                answers.append((body["reply_to"], answer))
        return answers

    def _stop_agents(self):
        for process, _ in self._agents.values():
            _signal(process, signal.SIGTERM)
        for process, _ in self._agents.values():
            try:
                process.wait(AGENT_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                _signal(process, signal.SIGKILL)
                process.wait()
        self._agents.clear()

    def _deliver(self, operation_id, attempt, agent):
        with _environment({local.NAME_ENV: agent}):
            try:
                run_operation.run(operation_id, attempt, proof=keys.prove(signing.agent_key(agent), keys.Purpose.OPERATION,
                                                                          [operation_id, attempt]))
            except (Retry, AttemptFailed):
                pass  # the attempt failed and was reported: the engine decides what follows
            except Reject as exc:
                raise HarnessError(f"attempt {attempt} of operation {operation_id} was not run: {exc}") from None

    def _go_on(self, until=None) -> bool:
        """Run what is due now; if nothing was, move the clock to the next stored deadline (not
        past ``until``) and run what is due there. Whether anything could be done."""
        if self._run_due():
            return True
        due = tick.next_deadline(self.clock.current())
        if due is None or (until is not None and due > until):
            return False
        self.clock.move_to(due)
        self._run_due()
        return True

    def _run_due(self) -> bool:
        """Run what the stored deadlines make due at the clock's time; whether there was any."""
        moment = self.clock.current()
        self._step(lambda: tick.run_deadlines(moment))
        if not (self._advances or self._attempts or self._remote_in_flight()):
            return False
        self._run_queued()
        return True

    def _pass(self, execution_id):
        """A dispatcher's pass over the execution, what each of its turns deferred to its commit
        run at the end of that turn, as a manager's commits run it: the run of the workflow kept
        for the next turn (``engine.live``), which goes on from there instead of replaying."""
        turns = dispatcher.turns(execution_id)
        while self._step(lambda: next(turns, False)) is not False:
            pass

    def _step(self, work):
        """``work()``, then what it deferred until a commit — at once when the test holds a
        transaction that never commits (pytest-django's ``db``)."""
        with TestCase.captureOnCommitCallbacks(execute=True):
            return work()

    def _ended(self, execution_id):
        return Execution.objects.filter(pk=execution_id, status__in=EXECUTION_TERMINAL).exists()

    def _open_steps(self, execution_id):
        return sorted(Operation.objects.filter(execution_id=execution_id).exclude(state__in=OPERATION_TERMINAL)
                      .values_list("name", flat=True))

    def _restore_fakes(self):
        for definition, func in self._fakes.items():
            definition.func = func
        self._fakes.clear()


class _Outlet:
    """Where the engine's messages go (``broker.diverted``): queued on the harness, run in order."""

    def __init__(self, harness):
        self.harness = harness

    def advance(self, execution_id):
        if execution_id not in self.harness._advances:
            self.harness._advances.append(execution_id)

    def operations(self, operations):
        """Queued to run here, but those of a real agent: left to the broker."""
        remote = [op for op in operations if op.agent in self.harness._agents]
        self.harness._remote.update((str(op.pk), op.attempt) for op in remote)
        self.harness._attempts.extend((str(op.pk), op.attempt, op.agent) for op in operations if op not in remote)
        return remote

    def cancel(self, attempts):
        """Noted for the attempts run here (``ctx.is_cancelled()``); broadcast to real agents."""
        local.request_cancel([local.attempt_key(pk, attempt) for pk, attempt in attempts])
        return attempts if self.harness._agents else []

    def stop(self, attempts):
        """An attempt run here is claimed as it comes, never unasked: it will not start (answered
        "refused"); a real agent's is asked."""
        remote = [(pk, attempt) for pk, attempt in attempts if (str(pk), attempt) in self.harness._remote]
        return {(str(pk), attempt): "refused" for pk, attempt in attempts if (pk, attempt) not in remote}, remote

    def kill(self, attempts):
        """Nothing runs here between two steps of the harness; a real agent's are broadcast."""
        return attempts if self.harness._agents else []

    def revoke(self, task_ids):
        """Every message run here was run as it came; a real agent's may still wait."""
        return task_ids if self.harness._agents else []


class _Line:
    """The agents' line to the managers (``link.through``): the intake, at once, in this process."""

    def __init__(self, harness):
        self.harness = harness

    def report(self, kind, **fields):
        body = json.loads(json.dumps(link.signed(kind, **fields)))
        return self.harness._step(lambda: intake.take([body]))

    def claim(self, operation_id, attempt, timeout):
        answers = self.report(wire.Kind.CLAIM, operation=str(operation_id), attempt=attempt,
                              pid=os.getpid(), reply_to=wire.reply_queue(local.name(), "harness", os.getpid()),
                              id="harness")
        return keys.without_proof(json.loads(json.dumps(answers[0][1]))) if answers else None


def _tail(path, lines=60):
    try:
        with open(path, errors="replace") as log:
            return f"--- {path} ---\n" + "".join(log.readlines()[-lines:])
    except OSError:
        return f"--- {path}: not readable ---"


def _signal(process, sig):
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def _environment(values):
    kept = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
