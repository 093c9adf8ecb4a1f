"""Local steps: short work that runs inside the manager's pass over its execution, with no agent,
no queue and no message.

A step is local when its operation is declared ``@operation(local=True)`` or its call says
``local=True``. Such a step is stored as any step is, and made ready as any step is (its
dependencies succeeded, a retry fell due, a limit let it through), but no message carries it: it
moves ``sending -> sent`` at once, and the pass over its execution runs it (:mod:`.passes`):

1. the pass moves it ``started`` (its agent: the management queue's name, as for a step a
   manager runs) and commits, with whatever else the pass stored;
2. it runs the function in the pass' own process, outside any transaction, interrupted at its
   timeout (:mod:`.running`);
3. in the next transaction, under the execution's row lock, it records what the function did
   (``engine.reports``, as an agent's report is recorded), and the workflow goes on in the same
   pass, which may start the next local step in that same commit.

A chain of local steps is a loop of commits inside one advance task. Everything else is what
any step has: rows and events, attempts and retries, cancel (awaited while it runs) and kill
(the pass' process ends; the attempt is ``cancelled`` "killed"), the graph, the timeline. It runs
at least once: a pass that dies before the result is committed leaves the attempt ``started``,
and it is lost (a manager that starts reconciles it) or times out (the tick), and runs again.

Where a step was made ready outside a pass over its execution (an agent's report, the tick's
retry, the gate), the execution is sent an ``advance`` instead (:mod:`.due`).
"""
