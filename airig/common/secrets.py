"""The one placeholder a secret has before the launcher generates it.

`.env.example` ships `change-me` for every secret; `up` replaces it once. Anything that
reads a secret (brain, worker, file service, the CLI's brain client, preflight) refuses
the placeholder and the empty value alike.
"""

from __future__ import annotations

PLACEHOLDER = "change-me"


def is_placeholder(value: str | None) -> bool:
    """True for a secret nobody set: empty, blank or still the placeholder."""
    return value is None or value.strip() in ("", PLACEHOLDER)
