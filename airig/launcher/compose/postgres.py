"""The brain's store on PostgreSQL (AIRIG_BRAIN_STORE=postgres): 01-infra's `postgres`
service as the launcher sees it.

The service's user and database are fixed in 01-infra/compose.yaml; its password is
POSTGRES_PASSWORD, which `up` generates into .env like the kit's tokens. The brain gets
``BRAIN_DATABASE_URL`` through ``.airig/host.env`` (``AIRIG_BRAIN_DATABASE_URL``, written
mode 600: it holds the password), built here with the password percent-encoded, so a
password the user chose with ``@ : / % # ' " $`` in it still names this server. The URL is
never printed: `--dry-run` names host.env, not its lines.
"""

from __future__ import annotations

from urllib.parse import quote

from airig.common.errors import ConfigError
from airig.common.secrets import is_placeholder
from airig.launcher.settings import Settings

STORE_POSTGRES = "postgres"
PROFILE = "postgres"  # 01-infra/compose.yaml's profile of the service
SERVICE = "postgres"  # its service, and its name on ai-network
INFRA_STACK = "01-infra"
USER = "airig"  # POSTGRES_USER in 01-infra/compose.yaml
DATABASE = "brain"  # POSTGRES_DB there
PORT = 5432
VOLUME = "brain-postgres"  # the service's volume, without the rig's prefix
# host.env's key; 03-agents/compose.yaml gives it to the brain as BRAIN_DATABASE_URL
URL_VARIABLE = "AIRIG_BRAIN_DATABASE_URL"
# The top of the service's volume (PGDATA is a folder below it): `backup`'s dump and
# `restore`'s file lie here, on the volume's disk, never in the container's memory.
DUMP_DIR = "/var/lib/postgresql/data"


def enabled(settings: Settings) -> bool:
    """This rig runs the postgres service: AIRIG_BRAIN_STORE=postgres and a brain of its
    own (a joined rig's workers use the other machine's brain, and its store)."""
    # getattr: a settings stand-in that predates the knob (the backup tests' fakes) is on
    # SQLite, as a kit whose .env predates it is
    store = getattr(settings, "brain_store", "sqlite")
    return store == STORE_POSTGRES and not settings.joined


def database_url(settings: Settings) -> str:
    """The brain's URL of the postgres service; the password percent-encoded (nothing left
    as it is: ``quote(safe="")``), so no character of it ends the user part early. An
    empty or placeholder password is refused: `up` generates one first."""
    password = settings.postgres_password
    if is_placeholder(password):
        raise ConfigError(
            "AIRIG_BRAIN_STORE=postgres but POSTGRES_PASSWORD is empty",
            "run `python start_services.py up`: it generates one into .env",
        )
    return f"postgresql://{USER}:{quote(password, safe='')}@{SERVICE}:{PORT}/{DATABASE}"


def store_env(settings: Settings) -> dict[str, str]:
    """host.env's line for the brain: the URL with postgres, empty (SQLite) without. A
    stopped kit's plan (down, status) has no password to need: its URL is left empty."""
    if not enabled(settings) or is_placeholder(settings.postgres_password):
        return {URL_VARIABLE: ""}
    return {URL_VARIABLE: database_url(settings)}
