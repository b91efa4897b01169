"""Test-only stand-ins for third-party services (see README.md)."""
