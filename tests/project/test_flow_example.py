"""The worked example of docs/flow-control.md (docs/examples/payments.py) runs as the page says:
every invoice charged, one receipt per customer, and the provider's limits kept — ten calls a
second and five at once — on the test's clock."""

from datetime import timedelta

import pytest
from django.test import override_settings

MODULE = "docs.examples.payments"


@pytest.fixture
def payments():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=[MODULE]):
        yield


def test_the_payments_example_charges_every_invoice_within_the_providers_limits(payments, switchyard):
    invoices = [{"id": i, "customer": ("acme", "globex")[i % 2], "amount": 10 + i} for i in range(25)]
    result = switchyard.run("pay_invoices", {"invoices": invoices})

    assert result.status == "completed"
    assert result.payload == {"charged": sum(10 + i for i in range(25))}
    charges = sorted(op.sending_at for name, op in result.operations.items() if name.startswith("charge-"))
    assert len(charges) == 25
    assert max(sum(1 for at in charges if start <= at < start + timedelta(seconds=1)) for start in charges) <= 10
    assert charges[-1] - charges[0] >= timedelta(seconds=2), "25 at ten a second: three windows"
    assert sorted(name for name in result.operations if name.startswith("receipt-")) == ["receipt-acme", "receipt-globex"]
