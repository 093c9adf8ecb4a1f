"""The shop's workflows (listed in ``SWITCHYARD_WORKFLOW_MODULES``).

``fulfil_order`` reserves each line of an order on the warehouse's agent, charges the card
once everything is reserved, then books a courier. While the courier's booking service is
down (the file ``<SHOP_DATA_DIR>/courier-outage`` exists) booking fails, is retried once, and
the execution ends ``failed``; once the service is back, resuming the execution books the
courier and completes it, and the card is not charged a second time: steps that succeeded are
never run again. Every charge is one line in ``<SHOP_DATA_DIR>/ledger.jsonl``.

``stocktake`` counts aisles on the warehouse's agent, slowly; cancelling it stops the counting
at once.
"""

import json
import os
import time
from pathlib import Path

from django.conf import settings

from workflows_app.sdk import RecoverableError, operation, workflow

#: Unit prices, in cents.
PRICES = {"apple": 30, "pear": 45, "plum": 20}


def data_dir() -> Path:
    path = Path(settings.SHOP_DATA_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def ledger_path() -> Path:
    return data_dir() / "ledger.jsonl"


def courier_outage_path() -> Path:
    return data_dir() / "courier-outage"


@operation
def reserve_stock(ctx, order_id, sku, quantity):
    if sku not in PRICES:
        raise ValueError(f"order {order_id}: we do not sell {sku!r}")
    return {"sku": sku, "quantity": quantity, "unit_price": PRICES[sku]}


@operation
def charge_card(ctx, order_id, reservations):
    amount = sum(line["quantity"] * line["unit_price"] for line in reservations)
    entry = {"order_id": order_id, "amount": amount, "execution": str(ctx.execution_id), "attempt": ctx.attempt}
    with open(ledger_path(), "a") as ledger:
        ledger.write(json.dumps(entry) + "\n")
    return {"amount": amount}


@operation(max_retries=1, retry_interval=0.5)
def book_courier(ctx, order_id):
    if courier_outage_path().exists():
        raise RecoverableError("the courier's booking service is down")
    return {"tracking": f"TRK-{order_id}"}


@workflow
def fulfil_order(ctx, order_id, items, warehouse="warehouse"):
    """``items``: quantities by SKU, e.g. ``{"apple": 2}``; ``warehouse``: the agent of the warehouse."""
    lines = ctx.graph()
    reserved = [lines.add(f"reserve-{sku}", reserve_stock, order_id, sku, quantity, agent=warehouse)
                for sku, quantity in sorted(items.items())]
    reservations = lines.run()
    # No agent: the charge runs on the shop's manager.
    charge = ctx.await_execute("charge", charge_card, order_id, [reservations[name] for name in reserved])
    label = ctx.await_execute("courier", book_courier, order_id, agent=warehouse)
    ctx.set_payload({"order_id": order_id, "charged": charge["amount"], "tracking": label["tracking"]})


@operation(max_retries=0)
def count_aisle(ctx, aisle, seconds):
    """Counts one aisle for ``seconds``, stopping as soon as the execution is cancelled."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.1)
    return {"aisle": aisle, "counted_by": os.getpid()}


@workflow
def stocktake(ctx, aisles=3, seconds_per_aisle=5.0, warehouse="warehouse"):
    count = ctx.graph()
    for aisle in range(1, aisles + 1):
        count.add(f"aisle-{aisle}", count_aisle, aisle, seconds_per_aisle, agent=warehouse)
    ctx.set_payload({"aisles_counted": len(count.run())})
