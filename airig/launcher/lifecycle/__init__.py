"""The verbs that change the kit, each over the compose room's plan and adapter: up/down,
join, restart, tune, update, backup and restore, with their checks and the rig's lock."""
