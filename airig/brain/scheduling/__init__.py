"""Which task a worker gets, and when a task runs again."""
