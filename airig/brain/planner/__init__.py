"""The brain's model plans: goals drafted into plans, and `plan` tasks that grow their plan."""
