"""The shop's background tasks, written with Django's own Tasks API (the django-tasks package on
Django 5.2; ``django.tasks`` on Django 6): nothing of Switchyard's in them. ``TASKS`` in
settings.py names Switchyard's backend, which makes each enqueued task a durable execution — in
the admin, the API and Flower, cancellable, retried, surviving restarts.

``send_receipt`` writes an order's receipt, one line of ``<SHOP_DATA_DIR>/receipts.jsonl``.
"""

import json

from django_tasks import task

from shop.workflows import data_dir


def receipts_path():
    return data_dir() / "receipts.jsonl"


@task
def send_receipt(order_id, email):
    number = f"R-{order_id}"
    with open(receipts_path(), "a") as receipts:
        receipts.write(json.dumps({"order_id": order_id, "email": email, "receipt": number}) + "\n")
    return {"order_id": order_id, "receipt": number}
