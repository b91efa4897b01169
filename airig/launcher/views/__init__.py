"""The verbs that read the kit and change nothing: status, logs, doctor and triage."""
