"""Every error Switchyard raises, in one tree.

::

    SwitchyardError
    ├── WorkflowError                 raised in or for workflow code (re-exported by the sdk)
    │   ├── RecoverableError          an operation failed; retry it (optionally after retry_after s)
    │   ├── NonRecoverableError       an operation failed; never retry it
    │   ├── OperationCancelled        the operation stopped because its execution is cancelling
    │   ├── EventTimeout              await_event waited longer than its timeout
    │   ├── StepFailed                a step the workflow waits on failed for good
    │   └── NonDeterministicWorkflow  a replay asked for a stored step with another operation or arguments
    ├── TransitionRefused             a status/state change that was not applied
    │   ├── InvalidTransition         the pair is not in the table, or the row changed under us
    │   ├── StaleToken                the caller's execution token is no longer current
    │   ├── StaleAttempt              a report for an attempt that is no longer current
    │   └── ActionRefused             cancel/kill/resume asked of an execution whose status forbids it
    ├── ConfigurationError            WORKFLOWS settings that cannot work
    ├── RegistrationError             a workflow or operation registered twice, or not registered
    ├── GraphError (also ValueError)  a graph or canvas that cannot run (engine.graph)
    ├── ParameterError                execution parameters that do not fit the workflow
    │   └── ValueRefused              a JSON value that cannot be stored (values.check)
    ├── PermissionRefused             a user without the permission an action needs (permissions.check)
    ├── ExistingRunningExecution      a start for a deployment that has an active execution
    ├── HistoryRefused                an execution's history document that cannot be read (engine.history)
    └── DatabaseUnavailable           the database stayed unreachable longer than DATABASE_OUTAGE_TOLERANCE

Every error pickles with its attributes (it may cross a process boundary in a Celery result).
"""


class SwitchyardError(Exception):
    """Base of every Switchyard error."""


class WorkflowError(SwitchyardError):
    """Base of the errors raised in or for workflow and operation code."""


class RecoverableError(WorkflowError):
    """An operation failed in a way worth retrying, optionally not before ``retry_after`` s."""

    retryable = True

    def __init__(self, message="", retry_after=None):
        super().__init__(message, retry_after)
        self.message = message
        self.retry_after = retry_after

    def __str__(self):
        return str(self.message)


class NonRecoverableError(WorkflowError):
    """An operation failed in a way that retrying cannot mend."""

    retryable = False


class OperationCancelled(WorkflowError):
    """The operation stopped because its execution is being cancelled."""

    retryable = False


class EventTimeout(WorkflowError):
    """``await_event`` waited longer than its ``timeout``."""

    def __init__(self, name="", timeout=None):
        super().__init__(name, timeout)
        self.name = name
        self.timeout = timeout

    def __str__(self):
        return f"no event {self.name!r} within {self.timeout}s"


class StepFailed(WorkflowError):
    """A step the workflow waits on ended failed (or cancelled) for good.

    ``step``: its name; ``error``: its stored error (``{"type", "message", "traceback"}``);
    ``cause``: for a step the engine cancelled because another one failed (a dependency, or
    the failure mode), the name of that step; else ``None``."""

    def __init__(self, step="", error=None, cause=None):
        super().__init__(step, error, cause)
        self.step = step
        self.error = error
        self.cause = cause

    def __str__(self):
        detail = (self.error or {}).get("message") if isinstance(self.error, dict) else self.error
        return f"step {self.step!r} failed" + (f": {detail}" if detail else "")


class NonDeterministicWorkflow(WorkflowError):
    """A replay of the workflow asked for a stored step name with another operation or other
    arguments than the ones stored under it (the workflow code changed, or depends on something
    that is not durable). ``stored`` and ``requested`` are ``{"operation", "args", "kwargs"}``."""

    def __init__(self, step="", stored=None, requested=None):
        super().__init__(step, stored, requested)
        self.step, self.stored, self.requested = step, stored, requested

    def __str__(self):
        def call(c):
            c = c or {}
            return f"{c.get('operation')!s} args={c.get('args')!r} kwargs={c.get('kwargs')!r}"

        return (f"non-deterministic workflow: step {self.step!r} was stored as {call(self.stored)}, "
                f"and this replay asked for {call(self.requested)}; workflow code must ask for the same "
                "steps, with the same operations and arguments, in the same order on every run")


class TransitionRefused(SwitchyardError):
    """A status or state change that was not applied; nothing was written."""


class InvalidTransition(TransitionRefused):
    """The move is not in the transition table, or the row was no longer in ``source``."""

    def __init__(self, kind="", pk=None, source="", target="", current=None):
        super().__init__(kind, pk, source, target, current)
        self.kind, self.pk, self.source, self.target, self.current = kind, pk, source, target, current

    def __str__(self):
        moved = "" if self.current in (None, self.source) else f" (it is {self.current} now)"
        return f"{self.kind} {self.pk}: cannot go from {self.source} to {self.target}{moved}"


class StaleToken(TransitionRefused):
    """The execution token presented is not the current one (a resume or kill replaced it)."""

    def __init__(self, pk=None):
        super().__init__(pk)
        self.pk = pk

    def __str__(self):
        return f"execution {self.pk}: the token is no longer current"


class StaleAttempt(TransitionRefused):
    """A report names an attempt that is no longer the operation's current one."""

    def __init__(self, pk=None, attempt=None, current=None):
        super().__init__(pk, attempt, current)
        self.pk, self.attempt, self.current = pk, attempt, current

    def __str__(self):
        return f"operation {self.pk}: attempt {self.attempt} is not current (attempt {self.current} is)"


class ActionRefused(TransitionRefused):
    """An action (cancel, force-cancel, kill, resume, force-resume) that the execution's status
    does not allow; nothing was changed."""

    def __init__(self, action="", pk=None, status="", allowed=()):
        super().__init__(action, pk, status, tuple(allowed))
        self.action, self.pk, self.status, self.allowed = action, pk, status, tuple(allowed)

    def __str__(self):
        allowed = ", ".join(str(s) for s in self.allowed)
        return f"cannot {self.action} execution {self.pk}: it is {self.status} ({self.action} is allowed from {allowed})"


class WorkflowActionRefused(TransitionRefused):
    """Pause of a workflow paused already, or unpause of one that is not; nothing was changed."""

    def __init__(self, action="", workflow_id="", paused=False):
        super().__init__(action, workflow_id, paused)
        self.action, self.workflow_id, self.paused = action, workflow_id, paused

    def __str__(self):
        return f"cannot {self.action} workflow {self.workflow_id}: it is {'paused' if self.paused else 'not paused'}"


class ConfigurationError(SwitchyardError):
    """WORKFLOWS settings that cannot work (an unknown key, a value of the wrong kind)."""


class RegistrationError(SwitchyardError):
    """Two registrations under one name, or a name that nothing registered."""


class ParameterError(SwitchyardError):
    """Execution parameters that do not fit the workflow's signature (missing or unknown)."""


class ValueRefused(ParameterError):
    """A JSON value that may not be stored (``workflows_app.values.check``): ``place`` names where
    it was (``parameters.size``, ``result``), ``reason`` why; ``too_large`` when only its size is
    the problem (the API answers 413 then, 400 otherwise)."""

    def __init__(self, place="", reason="", too_large=False):
        super().__init__(place, reason, too_large)
        self.place, self.reason, self.too_large = place, reason, too_large

    def __str__(self):
        return f"{self.place}: {self.reason}" if self.place else self.reason


class PermissionRefused(SwitchyardError):
    """``user`` may not ``action`` (``workflows_app.permissions``): ``missing`` lists the
    permissions it lacks; nothing was changed."""

    def __init__(self, user="", action="", missing=(), target=""):
        super().__init__(user, action, tuple(missing), target)
        self.user, self.action, self.missing, self.target = user, action, tuple(missing), target

    def __str__(self):
        on = f" {self.target}" if self.target else ""
        return f"{self.user or 'this user'} may not {self.action}{on}: it needs the permission {', '.join(self.missing)}"


class ExistingRunningExecution(SwitchyardError):
    """A new execution of a ``deployment_id`` that has an active one, asked without ``queue``
    or ``force``."""

    def __init__(self, deployment_id="", active_id=None):
        super().__init__(deployment_id, active_id)
        self.deployment_id, self.active_id = deployment_id, active_id

    def __str__(self):
        return (f"deployment {self.deployment_id!r} has an active execution ({self.active_id}): "
                'ask with "queue": true to run after it, or "force": true to run beside it')


class HistoryRefused(SwitchyardError):
    """A document that is not an execution's history as ``export_execution`` writes it
    (``workflows_app.engine.history``): ``reason`` says what is wrong, in one line."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = reason

    def __str__(self):
        return f"not an execution history: {self.reason}"


class DatabaseUnavailable(SwitchyardError):
    """The database stayed unreachable longer than ``WORKFLOWS["DATABASE_OUTAGE_TOLERANCE"]``
    while ``what`` waited for it (``workflows_app.outages``)."""

    def __init__(self, what="", seconds=0.0):
        super().__init__(what, seconds)
        self.what, self.seconds = what, seconds

    def __str__(self):
        return f"the database was unavailable for {self.seconds:.0f}s while {self.what}: gave up"
