"""The worked example of docs/flow-control.md: a payment provider that takes 10 calls a second
and 5 at once, across every agent and manager."""

from workflows_app.sdk import operation, workflow


@operation(rate_limit="10/s", concurrency=5, max_retries=3, retry_interval=2)
def charge_invoice(ctx, invoice, amount):
    """One call to the payment provider (here: pretend)."""
    return {"invoice": invoice, "charged": amount}


@operation(concurrency=1, concurrency_key="customer")
def mail_receipt(ctx, customer, invoices):
    """One mail run per customer at a time, whichever invoices it covers."""
    return {"customer": customer, "receipts": len(invoices)}


@workflow
def pay_invoices(ctx, invoices):
    """Charge every invoice (``{"id", "customer", "amount"}``) side by side, then send each customer
    one receipt: the managers keep the provider's limits, however many steps are ready at once."""
    charges = ctx.graph()
    for invoice in invoices:
        charges.add(f"charge-{invoice['id']}", charge_invoice, invoice["id"], invoice["amount"], agent="payments")
    charged = charges.run()
    receipts = ctx.graph()
    for customer in sorted({invoice["customer"] for invoice in invoices}):
        mine = [invoice["id"] for invoice in invoices if invoice["customer"] == customer]
        receipts.add(f"receipt-{customer}", mail_receipt, customer, mine, agent="mail")
    receipts.run()
    ctx.set_payload({"charged": sum(step["charged"] for step in charged.values())})
