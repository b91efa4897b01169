"""The kit as Compose sees it: the plan (stacks, profiles, generated files), the Docker
adapter every container goes through, one container's state and health verdict, the
per-stack env files, pulls and the one-off init containers."""
