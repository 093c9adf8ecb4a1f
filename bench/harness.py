"""``python -m bench.harness [--rounds N]``: how long the test harness (the ``switchyard``
fixture of ``workflows_app.testing``) takes to run a workflow to its end inside a test: ten steps
(eight additions, an hour's durable sleep, a charge whose first attempt fails and is retried
after its back-off of ten minutes), on the configured database, each round in a transaction
rolled back as pytest-django's ``db`` does. Prints the median and the slowest round.

There is no plain Celery side: Celery has no durable sleep or stored retry to skip over, and
this is what a workflow's test costs, not the engine's speed."""

import argparse
import os
import statistics
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ["SWITCHYARD_WORKFLOW_MODULES"] = "tests.testing.workflows"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from tests.testing.workflows import harness_charge, harness_order
    from workflows_app.sdk import RecoverableError
    from workflows_app.testing.harness import Harness

    call_command("migrate", verbosity=0)
    seconds = []
    for _ in range(args.rounds + 1):  # the first round warms the caches up: not counted
        with transaction.atomic():
            began = time.perf_counter()
            with Harness() as harness:
                harness.fake(harness_charge, raises=RecoverableError("busy"), times=1, returns={"charged": 1})
                result = harness.run(harness_order, {"n": 8})
            seconds.append(time.perf_counter() - began)
            assert result.status == "completed" and len(result.operations) == 9, result
            transaction.set_rollback(True)
    counted = seconds[1:]
    print(f"test harness, {connection.vendor}: a ten-step workflow with a retry and an hour's sleep, "
          f"{args.rounds} rounds: median {statistics.median(counted) * 1000:.0f} ms, slowest {max(counted) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
