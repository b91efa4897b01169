"""The brain: plans, the durable task store, the scheduler and the HTTP API."""
