"""The worker runtime every Switchyard worker process shares, manager or agent: this run's
name and incarnation (``local``), the process groups its pool processes lead and the records of
what they run (``local``, ``pool``), the remote-control commands (``control``), the heartbeat,
the graceful shutdown and the worker's start (``lifecycle``), and a manager's own start and tick
(``manager``). It sits on top of the engine (``workflows_app``), which knows nothing of it."""
