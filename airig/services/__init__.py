"""Servers that only Compose runs (`command:` lines): the file service (01-infra) and
the models-ready gate (02-compute)."""
