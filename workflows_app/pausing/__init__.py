"""Pausing: holding back what an execution (or every execution of a workflow) would send next,
while an operator looks at something downstream, without losing anything.

* :mod:`.executions` — one execution: ``started`` -> ``paused`` -> ``started``. A paused
  execution sends nothing new: its dispatcher does not run the workflow code, its retries that
  fall due and its steps that a limit held back stay where they are, its timers keep their
  deadlines. What it had sent goes on — an agent's claim of such an attempt is answered "run",
  and outcomes are stored as they come. Events sent to it are kept. Unpausing wakes it: the code
  sees every outcome, event and timer that came meanwhile. Cancel, force-cancel and kill work as
  from ``started``.

The services (``workflows_app.services``) check the permission and the status; this package
does the move, in the caller's transaction, under the execution's row lock.
"""
