"""The worker side: agent registry and heartbeats, the operation runner, kill handling."""
