"""The worked example of docs/local-steps.md: an order's short decisions and bookkeeping run as
local steps, in the manager's pass; the card charge and the parcel run on the agents that hold
the payment provider's credentials and the warehouse's printer."""

from workflows_app.sdk import operation, workflow

PRICES = {"widget": 250, "gadget": 1200}  # cents; in a real project, a query


@operation(local=True)
def price_order(ctx, items):
    """A computation: local by declaration, wherever a workflow calls it."""
    return sum(PRICES[item["sku"]] * item["qty"] for item in items)


@operation(local=True, timeout=5, max_retries=5, retry_interval=1)
def record_invoice(ctx, order_id, amount):
    """A call to an internal API, made idempotent: a manager that dies in the middle runs it
    again, with the same key (the step's id, the same on every attempt and every run)."""
    key = f"invoice-{ctx.operation_id}"
    # billing.create_invoice(order_id, amount, idempotency_key=key, timeout=3)
    return {"invoice": f"INV-{order_id}", "amount": amount, "idempotency_key": key}


@operation(max_retries=3, retry_interval=10, retry_backoff=2)
def charge_card(ctx, order_id, amount):
    """Runs on the agent "payments", the only host with the provider's credentials."""
    return {"order_id": order_id, "charged": amount}


@operation(timeout=600)
def print_label(ctx, order_id, address):
    """Runs on the warehouse's agent: its printer is there."""
    return {"label": f"LBL-{order_id}", "to": address}


@operation
def needs_review(ctx, amount, country):
    """A decision; an ordinary operation, run locally where the workflow says so."""
    return amount > 50_000 or country not in ("FR", "DE", "NL")


@workflow
def fulfil_order(ctx, order_id="A-1", items=({"sku": "widget", "qty": 2},), country="FR", address="1 rue X"):
    total = ctx.await_execute("price", price_order, list(items))                        # local: declared
    if ctx.await_execute("review", needs_review, total, country, local=True):           # local: this call
        ctx.await_event("approved", timeout=24 * 3600)
    ctx.await_execute("charge", charge_card, order_id, total, agent="payments")         # an agent
    invoice = ctx.await_execute("invoice", record_invoice, order_id, total)             # local
    label = ctx.await_execute("label", print_label, order_id, address, agent="warehouse")
    ctx.set_payload({"total": total, "invoice": invoice["invoice"], "label": label["label"]})
