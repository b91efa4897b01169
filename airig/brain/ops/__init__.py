"""The operator's side: probes, alerts, notices and metrics."""
