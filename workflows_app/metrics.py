"""The metrics of ``GET /api/v1/metrics``: what the system holds now, in Prometheus' text format
(``prometheus_client``), for every process alike.

Every number is read when it is scraped, from what all processes share — the database, and the
broker for the reports waiting —, never from one process' memory: every web process answers the
same, however many managers and web processes run, and none loses anything by restarting.

A scrape runs six queries whatever the number of executions, each grouped in the database: one
scan of the executions (their counts, and the histogram of their durations: a conditional count
per bucket, a count and a sum), one of the operations (their counts and their two histograms),
one of the schedules, one of the queued executions, one of the steps held back by their
operation's limits, and the agents'. The histograms are of the
ended executions and operations the database holds, so their counts fall when
``purge_executions`` deletes some (docs/metrics.md says what that does to ``rate()``).

Series that belong to no workflow come from other apps through :func:`register`: ``agents``
adds ``switchyard_agents_online`` from its ``AppConfig.ready()``, as it adds its endpoint to the
API (``workflows_app.api.routes``), so that this app never imports it.
"""

from django.core.exceptions import EmptyResultSet
from django.db import NotSupportedError, connections
from django.db.models import Case, Count, F, FloatField, Func, Q, When
from django.utils.module_loading import import_string
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from workflows_app import broker, clock, permissions, wire
from workflows_app.flow import waiting
from workflows_app.models import Execution, Operation, Schedule
from workflows_app.registry import workflows
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus, OperationState, StepKind

#: Upper bounds (seconds) of the buckets of each histogram; each also has ``+Inf``.
EXECUTION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400)
OPERATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
QUEUE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

_sources = {}  # name -> a callable yielding metric families, or its dotted path


def register(name, source):
    """Add the metric families ``source()`` yields (a callable, or its dotted path, imported at the
    first scrape) to every scrape, under ``name`` (registering a name again replaces it). They
    are shown to whoever may scrape: a source must not tell one workflow's executions from another's."""
    _sources[name] = source


def exposition(user=None) -> bytes:
    """The metrics as ``user`` may see them, in Prometheus' text format (``CONTENT_TYPE_LATEST``).
    ``user=None`` is the server's own access (a scrape with the token): every series. A user
    sees nothing of the workflows whose own permission it lacks (``permissions.hidden_workflows``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(user))
    return generate_latest(registry)


class Collector:
    """prometheus_client's custom collector: each scrape's metric families, read at ``collect()``."""

    def __init__(self, user=None):
        self.user = user

    def collect(self):
        yield from self.executions()
        yield from self.operations()
        yield self.schedule_lateness()
        yield self.concurrency_queued()
        yield self.operations_waiting()
        reports = self.reports_waiting()
        if reports is not None:
            yield reports
        for source in _sources.values():
            yield from (import_string(source) if isinstance(source, str) else source)()

    def executions(self):
        """``switchyard_executions`` and ``switchyard_execution_duration_seconds``, from one scan."""
        durations = Histogram(EXECUTION_BUCKETS)
        counts = {}
        ended = Q(status__in=EXECUTION_TERMINAL, started_at__isnull=False, ended_at__isnull=False)
        rows = _grouped(permissions.visible(self.user, Execution.objects.order_by()), ["workflow_id", "status"],
                        [(durations, When(ended, then=Seconds(F("ended_at"), F("started_at"))))])
        for (workflow, status), count in rows:
            counts[workflow, status] = count
        # Every status of every workflow, zeros included: a series that appears only with its
        # first execution has no value to compare with before.
        hidden = set(permissions.hidden_workflows(self.user))
        gauge = GaugeMetricFamily("switchyard_executions", "Executions stored, by workflow and status (ended ones "
                                  "until they are purged).", labels=["workflow", "status"])
        for workflow in sorted({workflow for workflow, _ in counts} | (set(workflows()) - hidden)):
            for status in ExecutionStatus.values:
                gauge.add_metric([workflow, status], counts.get((workflow, status), 0))
        yield gauge
        yield durations.family("switchyard_execution_duration_seconds", "Seconds from start to end of the ended "
                               "executions stored, by workflow.", "workflow", key=lambda keys: keys[0])

    def operations(self):
        """``switchyard_operations``, ``switchyard_operation_duration_seconds`` and
        ``switchyard_operation_queue_seconds``, from one scan of the operations run on agents (a
        child execution's step is its execution, counted as one)."""
        durations, queued = Histogram(OPERATION_BUCKETS), Histogram(QUEUE_BUCKETS)
        operations = permissions.visible_records(self.user, Operation.objects.order_by().filter(kind=StepKind.OPERATION))
        # An ended operation's last attempt, from its start to its outcome; and the time from
        # its send to its start. A time before the start is an earlier attempt's (one lost before
        # it started): not counted.
        rows = _grouped(operations, ["state", "operation", "agent"], [
            (durations, When(state=OperationState.SUCCEEDED, succeeded_at__gte=F("started_at"),
                             then=Seconds(F("succeeded_at"), F("started_at")))),
            (durations, When(state=OperationState.FAILED, failed_at__gte=F("started_at"),
                             then=Seconds(F("failed_at"), F("started_at")))),
            (queued, When(started_at__gte=F("sent_at"), then=Seconds(F("started_at"), F("sent_at")))),
        ])
        counts = dict.fromkeys(OperationState.values, 0)
        for (state, _, _), count in rows:
            counts[state] += count
        gauge = GaugeMetricFamily("switchyard_operations", "Operations stored, by state (ended ones until their "
                                  "executions are purged).", labels=["state"])
        for state, count in counts.items():
            gauge.add_metric([state], count)
        yield gauge
        yield durations.family("switchyard_operation_duration_seconds", "Seconds from the start of the last attempt "
                               "to the outcome of the operations that succeeded or failed, by operation.", "operation",
                               key=lambda keys: keys[1])
        yield queued.family("switchyard_operation_queue_seconds", "Seconds from sending an operation's attempt to its "
                            "agent's queue to its start there, by agent (the last attempt of every operation that "
                            "started).", "agent", key=lambda keys: keys[2])

    def schedule_lateness(self):
        family = GaugeMetricFamily("switchyard_schedule_lateness_seconds",
                                   "Seconds since each unpaused schedule's next slot fell due without being fired "
                                   "(0 when it is not due yet).", labels=["schedule", "workflow"])
        now = clock.now()
        due = (permissions.visible(self.user, Schedule.objects.order_by("workflow_id", "id"))
               .filter(paused=False, next_run_at__isnull=False).values_list("id", "workflow_id", "next_run_at"))
        for pk, workflow, next_run_at in due:
            family.add_metric([str(pk), workflow], max(0.0, (now - next_run_at).total_seconds()))
        return family

    def concurrency_queued(self):
        family = GaugeMetricFamily("switchyard_concurrency_queued",
                                   "Executions queued for a free place under their concurrency key, by key.",
                                   labels=["key"])
        rows = (permissions.visible(self.user, Execution.objects.order_by("concurrency_key"))
                .filter(status=ExecutionStatus.QUEUED).exclude(concurrency_key="")
                .values_list("concurrency_key").annotate(count=Count("pk")))
        for key, count in rows:
            family.add_metric([key], count)
        return family

    def operations_waiting(self):
        family = GaugeMetricFamily("switchyard_operations_waiting",
                                   "Steps held back by their operation's limits (rate_limit, concurrency), by operation "
                                   "and reason.", labels=["operation", "reason"])
        visible = permissions.visible_records(self.user, Operation.objects.filter(kind=StepKind.OPERATION))
        for (operation, reason), count in sorted(waiting.counts(visible).items()):
            family.add_metric([operation, reason], count)
        return family

    def reports_waiting(self):
        """None when the broker cannot say (it did not answer): the series is left out."""
        waiting = broker.waiting_messages(wire.reports_queue())
        if waiting is None:
            return None
        return GaugeMetricFamily("switchyard_reports_waiting", "Agents' reports waiting in the broker for a manager "
                                 "to store them.", value=waiting)


class Histogram:
    """A histogram's counts, added up over rows of :func:`_grouped` and labelled at the end."""

    def __init__(self, bounds):
        self.bounds = bounds
        self.series = {}  # a group's values (or a label's) -> [count, sum, [cumulative count per bound]]

    def add(self, keys, count, total, below):
        entry = self.series.setdefault(keys, [0, 0.0, [0] * len(self.bounds)])
        entry[0] += count
        entry[1] += total or 0.0
        entry[2] = [a + b for a, b in zip(entry[2], below)]

    def family(self, name, documentation, label, *, key):
        """The family labelled ``label`` with ``key(keys)`` of each group (groups of one label added
        up); a label with nothing counted has no series."""
        merged = Histogram(self.bounds)
        for keys, (count, total, below) in self.series.items():
            merged.add(key(keys), count, total, below)
        family = HistogramMetricFamily(name, documentation, labels=[label])
        for value, (count, total, below) in sorted(merged.series.items()):
            if count:
                family.add_metric([value], [(floatToGoString(bound), n) for bound, n in zip(self.bounds, below)]
                                  + [("+Inf", count)], sum_value=total)
        return family


def _grouped(queryset, fields, timings):
    """How many rows of ``queryset`` there are for each value of ``fields``: one query, grouped in
    the database, which also adds up each of ``timings`` into its histogram. A timing is
    ``(histogram, When(condition, then=seconds))``: rows that meet the condition are counted
    in that histogram (several timings may fill one). Returns ``[(values of fields, count)]``.

    Each timing's seconds are computed once per row, in a derived table the aggregates read: in
    the ORM's ``GROUP BY`` every aggregate would repeat the expression (each bucket's count
    too), and the database would compute it again for each."""
    columns = {f"metric_key_{i}": F(field) for i, field in enumerate(fields)}
    columns.update({f"metric_seconds_{i}": Case(when, default=None, output_field=FloatField())
                    for i, (_, when) in enumerate(timings)})
    inner = queryset.annotate(**columns).values_list(*columns)
    try:
        sql, params = inner.query.sql_with_params()
    except EmptyResultSet:  # a queryset that can match nothing (none())
        return []
    keys = ", ".join(f"metric_key_{i}" for i in range(len(fields)))
    aggregates, bounds = [], []
    for i, (histogram, _) in enumerate(timings):
        seconds = f"metric_seconds_{i}"
        aggregates += [f"COUNT({seconds})", f"SUM({seconds})"]
        aggregates += [f"COUNT(*) FILTER (WHERE {seconds} <= %s)"] * len(histogram.bounds)
        bounds += histogram.bounds
    connection = connections[inner.db]
    # An offset keeps the database from merging the derived table into the query (its planner
    # would, and compute each expression again for every aggregate that reads it).
    fence = "LIMIT -1 OFFSET 0" if connection.vendor == "sqlite" else "OFFSET 0"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {keys}, COUNT(*), {', '.join(aggregates)} FROM ({sql} {fence}) timed GROUP BY {keys}",
                       (*bounds, *params))
        rows = cursor.fetchall()
    found = []
    for row in rows:
        group, count, position = tuple(row[:len(fields)]), row[len(fields)], len(fields) + 1
        for histogram, _ in timings:
            width = len(histogram.bounds)
            histogram.add(group, row[position], row[position + 1], row[position + 2:position + 2 + width])
            position += 2 + width
        found.append((group, count))
    return found


class Seconds(Func):
    """Seconds from ``start`` to ``end`` (``Seconds(end, start)``, two timestamps), a float
    computed in the database: the histograms compare it with every bucket's bound."""

    arity = 2
    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError(f"the metrics' durations are computed on PostgreSQL and SQLite, not {connection.vendor}")

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, template="date_part('epoch', %(expressions)s)",
                              arg_joiner=" - ", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django stores a timestamp as text there; julianday() reads it to the millisecond.
        return super().as_sql(compiler, connection, template="((julianday(%(expressions)s)) * 86400.0)",
                              arg_joiner=") - julianday(", **extra)
