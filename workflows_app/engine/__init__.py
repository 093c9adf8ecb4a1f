"""The engine: graph logic, canvas compiler, the durable replay context, progress and tick."""
