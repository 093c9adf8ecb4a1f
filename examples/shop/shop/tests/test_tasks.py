"""The shop's background task, tested with Switchyard's pytest plugin: ``switchyard.enqueue``
enqueues it through the Tasks framework (the shop's ``TASKS``) and runs its execution inside the
test; ``get_result`` reads it back as the shop's view does."""

import json

import pytest

from shop.tasks import receipts_path, send_receipt


@pytest.fixture(autouse=True)
def shop_data(settings, tmp_path):
    settings.SHOP_DATA_DIR = tmp_path


def test_a_receipt_is_written_once_and_its_result_read_back(switchyard):
    ran = switchyard.enqueue(send_receipt, "o-7", "ann@example.com")

    result = send_receipt.get_result(ran.id)
    assert result.status == "SUCCESSFUL" and result.attempts == 1
    assert result.return_value == {"order_id": "o-7", "receipt": "R-o-7"}
    lines = [json.loads(line) for line in receipts_path().read_text().splitlines()]
    assert lines == [{"order_id": "o-7", "email": "ann@example.com", "receipt": "R-o-7"}]


def test_the_receipt_runs_as_an_execution_with_the_shops_retry_options(switchyard):
    ran = switchyard.enqueue(send_receipt, "o-8", "bob@example.com")

    assert ran.status == "completed"
    [step] = ran.operations.values()
    assert (step.name, step.max_retries, step.timeout) == ("shop.tasks.send_receipt", 3, 60)
