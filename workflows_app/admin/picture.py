"""What the execution page's picture draws of a graph (``queries.graph``): fan-outs as groups.

Siblings — steps of the same kind and operation with the same dependencies, dependents and
order arrows — are one box of the picture when there are ``GROUP_FROM`` or more of them: a
fan-out of 1,000 is one box with its counts per state, not 1,000 boxes in a column. The page
draws a graph only while its boxes, a group counted as one, are at most ``DRAW_LIMIT``.
"""

import re
from collections import defaultdict

from workflows_app import queries
from workflows_app.models import Operation

#: Siblings drawn as one box from this many.
GROUP_FROM = 8
#: Boxes (a group counts as one) beyond which the page summarises instead of drawing.
DRAW_LIMIT = 300
#: Operations beyond which the graph is not even read: its JSON alone would be too slow to send
#: every few seconds, and whether it could be drawn is not looked at.
READ_LIMIT = 5000


def natural_key(name):
    """``m2`` before ``m10``: digits compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def groups(graph) -> list[dict]:
    """The sets of GROUP_FROM or more siblings of ``graph``: ``{"members": [names, natural
    order], "kind", "operation"}``, ordered by their first member."""
    before, following = defaultdict(set), defaultdict(set)
    for kind, pairs in (("needs", graph["edges"]), ("order", graph["order"])):
        for source, target in pairs:
            following[source].add((kind, target))
            before[target].add((kind, source))
    siblings = defaultdict(list)
    for node in graph["nodes"]:
        name = node["name"]
        siblings[(node["kind"], node["operation"], frozenset(before[name]), frozenset(following[name]))].append(name)
    found = [({"members": sorted(names, key=natural_key), "kind": kind, "operation": operation})
             for (kind, operation, _, _), names in siblings.items() if len(names) >= GROUP_FROM]
    return sorted(found, key=lambda group: natural_key(group["members"][0]))


def boxes(graph, grouped) -> int:
    """How many boxes the picture of ``graph`` has with the groups ``grouped`` closed."""
    return len(graph["nodes"]) - sum(len(group["members"]) - 1 for group in grouped)


def of(execution_id, total=None) -> dict | None:
    """The graph of the execution with its groups (``queries.graph`` plus ``groups``), or None
    when it is too large to draw (``total``: its operations, when known)."""
    if total is None:
        total = Operation.objects.filter(execution_id=execution_id).count()
    if total > READ_LIMIT:
        return None
    graph = queries.graph(execution_id)
    graph["groups"] = groups(graph)
    return graph if boxes(graph, graph["groups"]) <= DRAW_LIMIT else None
