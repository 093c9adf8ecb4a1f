"""Bulk actions: one action (cancel, resume, kill...: any of ``services.ACTIONS``) taken on every
execution a filter selects, from the API (``POST /executions/bulk``), the admin (a list action
on the executions checked, or on all those matching) and the commands (``cancel_executions``,
``resume_executions``, ``pause_executions``).

A bulk action is one-at-a-time actions, many times: each execution goes through the same service
and the same permission check as it would alone (``services.ACTIONS[action]``), in a transaction
of its own, so what each door allows, refuses and records is the same whether it acts on one
execution or on ten thousand. What is new is only how they are chosen and counted:

- ``selection``: which executions, by the filters of ``GET /executions`` (its django-filter
  FilterSet, so the two take the same filters by construction), as a request body's object or as
  a command's options. An empty filter never means "everything": that has to be asked for.
- ``run``: the loop, batch by batch (ids read in key order, a batch at a time: memory and each
  query stay bounded whatever the selection), and the count of what happened — done, skipped
  (the status does not allow the action), refused (why) — or, in a dry run, what would happen.
- ``parallel``: several executions acted on at once, each on a database connection of its own.
- ``command``: the base of the commands, on ``selection``'s options.
"""
