"""The worker: registers with the brain, heartbeats, claims tasks, runs them, reports."""
