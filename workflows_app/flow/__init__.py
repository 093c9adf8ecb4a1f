"""Flow control: what decides when a start or a step may go ahead — idempotent starts, and the
rate and concurrency limits of operations."""
