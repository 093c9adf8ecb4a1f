"""Which executions a bulk action takes: those the filters of ``GET /executions`` select.

The filters are that list's own (``workflows_app.api.filters.ExecutionFilter``, a django-filter
FilterSet) and are applied by it, so a bulk action and the list take the same names and values
and select the same executions, by construction: a filter added to the list is one here too.
Two doors give them: a request body's ``filter`` object (names as the query's, values as its
text) and the commands' options (:func:`add_arguments`: ``--status``, ``--workflow-id``,
``--created-before``..., each with the filter's help), which ``list_executions`` shares.

Not a filter here: ``ordering`` (a bulk action has no order of its own; ``workflows_app.bulk.run``
reads in id order). And no filter at all never means "every execution" (the list's meaning):
a bulk action on everything is asked for as such (``everything``: ``"all": true``, ``--all``),
else it is refused (:class:`NoFilter`). A filter given an empty value is refused too, where the
list would ignore it, so that a script's empty variable cannot widen the selection to everything.
"""

from django.core.management.base import CommandError

from workflows_app.api.filters import ExecutionFilter

#: The filters a selection takes, as ``GET /executions`` names them.
FILTERS = tuple(name for name in ExecutionFilter.base_filters if name != "ordering")


class SelectionRefused(ValueError):
    """Filters that select nothing sensible: ``problems`` are ``(filter name, what is wrong)``."""

    def __init__(self, problems):
        super().__init__(problems)
        self.problems = list(problems)

    def describe(self, name_of=str) -> str:
        """One line, each filter named by ``name_of(name)`` (``filter.status``, ``--status``)."""
        return "; ".join(f"{name_of(name)} {problem}" for name, problem in self.problems)


class NoFilter(SelectionRefused):
    """No filter, and not asked for every execution."""

    def __init__(self):
        super().__init__([])


def select(filters, *, everything=False, base=None):
    """The executions of ``base`` (a queryset; default: every execution) that ``filters``
    (``{name: text}``, names of :data:`FILTERS`, values as ``GET /executions`` takes them) select.

    Raises :class:`SelectionRefused` for an unknown filter, an empty value or one that is not
    one of the filter's values, and :class:`NoFilter` for no filter at all unless
    ``everything``."""
    problems = [(name, f"is not a filter: one of {', '.join(FILTERS)}") for name in filters if name not in FILTERS]
    problems += [(name, "must not be empty (leave the filter out instead)") for name, value in filters.items()
                 if name in FILTERS and value == ""]
    if problems:
        raise SelectionRefused(problems)
    if not filters and not everything:
        raise NoFilter()
    base = ExecutionFilter._meta.model.objects.all() if base is None else base
    filterset = ExecutionFilter(data=dict(filters), queryset=base)
    if not filterset.is_valid():
        raise SelectionRefused([(name, _problem(name, filters.get(name), messages))
                                for name, messages in filterset.form.errors.items()])
    return filterset.qs


def _problem(name, value, messages) -> str:
    """What is wrong with a filter's value, as one phrase; for a filter with choices, which ones."""
    choices = ExecutionFilter.base_filters[name].extra.get("choices") if name in ExecutionFilter.base_filters else None
    if choices:
        shown = repr(value) if value is None or len(str(value)) <= 60 else repr(str(value)[:60]) + "…"
        return f"must be one of {', '.join(choice for choice, _ in choices)}, not {shown}"
    return "is not valid: " + " ".join(" ".join(messages).split())


# --- the commands' options -------------------------------------------------------------------

def option(name) -> str:
    """The command option of a filter: ``created_before`` -> ``--created-before``."""
    return "--" + name.replace("_", "-")


def add_arguments(parser):
    """One option per filter (:data:`FILTERS`), each taking the filter's text as the query does,
    with the filter's help; none is required. :func:`from_options` reads them back."""
    group = parser.add_argument_group("filters (those of GET /api/v1/executions)")
    for name in FILTERS:
        definition = ExecutionFilter.base_filters[name]
        choices = definition.extra.get("choices")
        text = definition.extra.get("help_text", "")
        if choices:  # listed in the help, checked by the FilterSet (the one place that knows them)
            text = f"{text}: {', '.join(value for value, _ in choices)}"
        group.add_argument(option(name), dest=name, default=None, metavar=name.upper(), help=text)


def from_options(options) -> dict:
    """The filters given as options (``{name: text}``), for :func:`select`."""
    return {name: options[name] for name in FILTERS if options.get(name) is not None}


def for_command(options, *, everything=False):
    """:func:`select` from a command's options (:func:`add_arguments`); a refusal is a one-line
    ``CommandError`` naming the options."""
    try:
        return select(from_options(options), everything=everything)
    except NoFilter:
        raise CommandError(f"give at least one filter ({', '.join(option(name) for name in FILTERS)}), or --all "
                           "to act on every execution") from None
    except SelectionRefused as refused:
        raise CommandError(refused.describe(option)) from None
