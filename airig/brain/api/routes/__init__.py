"""The brain's HTTP routes, one file per resource; shared dependencies live in
`airig.brain.api.deps`."""
