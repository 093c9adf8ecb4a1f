"""The shop's workflows, tested with Switchyard's pytest plugin: the ``switchyard`` fixture runs
a workflow to its end inside the test, its operations in this process, on the test database."""

import json

import pytest

from shop.workflows import book_courier, ledger_path
from workflows_app.sdk import RecoverableError

ORDER = {"order_id": "o-1", "items": {"apple": 2, "pear": 1}}


@pytest.fixture(autouse=True)
def shop_data(settings, tmp_path):
    """Each test keeps its ledger in a directory of its own."""
    settings.SHOP_DATA_DIR = tmp_path


def charges():
    path = ledger_path()
    return [json.loads(line)["amount"] for line in path.read_text().splitlines()] if path.exists() else []


def test_an_order_is_reserved_charged_and_booked(switchyard):
    result = switchyard.run("fulfil_order", ORDER)

    assert result.status == "completed"
    assert result.payload == {"order_id": "o-1", "charged": 105, "tracking": "TRK-o-1"}
    assert result.result("reserve-apple") == {"sku": "apple", "quantity": 2, "unit_price": 30}
    assert result.operations["reserve-apple"].agent == "warehouse"
    assert charges() == [105]


def test_a_courier_that_is_down_once_is_retried_and_the_card_is_charged_once(switchyard):
    courier = switchyard.fake(book_courier, raises=RecoverableError("the courier is down"), times=1,
                              returns={"tracking": "TRK-fake"})
    result = switchyard.run("fulfil_order", ORDER)

    assert result.status == "completed"
    assert result.payload["tracking"] == "TRK-fake"
    assert result.operations["courier"].attempt == 2
    assert len(courier.calls) == 2
    assert charges() == [105]


def test_a_courier_that_stays_down_fails_the_order_after_its_retry(switchyard):
    switchyard.fake(book_courier, raises=RecoverableError("the courier is down"))
    result = switchyard.run("fulfil_order", ORDER)

    assert result.status == "failed"
    assert "courier" in result.error
    assert result.operations["courier"].attempt == 2  # book_courier has one retry
    assert charges() == [105]


def test_an_unknown_item_fails_the_order_before_the_card_is_charged(switchyard):
    result = switchyard.run("fulfil_order", {"order_id": "o-2", "items": {"kiwi": 1}})

    assert result.status == "failed"
    assert "we do not sell 'kiwi'" in result.error
    assert "charge" not in result.operations
    assert charges() == []
