"""The brain's store on PostgreSQL, the kit's side (issue 38): AIRIG_BRAIN_STORE picks it,
01-infra's `postgres` profile runs it, the brain gets its URL with the password
percent-encoded, and that password is never printed nor left readable by others.

The compose model is checked with `docker compose config` (the compose binary only, no
engine: the image is never pulled), as tests/integration/test_compose_config.py does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import pytest
from support import ROOT, one_error, write_env

from airig.common.errors import ConfigError
from airig.launcher.compose import postgres
from airig.launcher.compose.plan import HOST_ENV, GpuSlot, amd_host_env, build_plan
from airig.launcher.envfile import ensure_env
from airig.launcher.lifecycle.preflight import env_check
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import PROFILES, load_settings

# Every character that ends or changes a URL's user part, or a shell word, or a .env value
HOSTILE = "p@ss:w/o%rd#?&=+ '\"$x{y}\\"


@pytest.fixture(autouse=True)
def no_shell_settings(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("AIRIG_", "POSTGRES_"))]:
        monkeypatch.delenv(key)


def settings_of(kit: Path, **values: str):
    write_env(kit, **values)
    return load_settings(kit)


def host_env(plan) -> dict[str, str]:
    text = next(t for p, t in plan.generated.items() if p.name == HOST_ENV)
    return dict(line.split("=", 1) for line in text.splitlines())


# ------------------------------------------------------------------ the knob
@pytest.mark.parametrize("value", ["mysql", "Postgres", "postgresql", "sqlite,postgres", "x" * 999])
def test_a_store_the_brain_does_not_run_on_is_one_line(kit, value):
    write_env(kit, AIRIG_BRAIN_STORE=value)
    with pytest.raises(ConfigError) as refused:
        load_settings(kit)
    assert refused.value.message.startswith("AIRIG_BRAIN_STORE=")
    assert "is not a store the brain runs on (from .env)" in refused.value.message
    assert refused.value.hint == "set AIRIG_BRAIN_STORE to sqlite or postgres"


def test_the_cli_refuses_a_bad_store_with_one_line_and_no_traceback(kit):
    write_env(kit, AIRIG_BRAIN_STORE="oracle")
    done = run(kit, "--dry-run", "--profile", "cpu")
    assert "Traceback" not in done.stdout + done.stderr
    one_error(done.returncode, done.stderr, "AIRIG_BRAIN_STORE", "oracle")


@pytest.mark.parametrize("value", [None, ""])
def test_sqlite_is_the_default_and_starts_no_database(kit, value):
    settings = settings_of(kit) if value is None else settings_of(kit, AIRIG_BRAIN_STORE=value)
    assert settings.brain_store == "sqlite" and not postgres.enabled(settings)
    plan = build_plan(settings, "cpu", [])
    assert plan.stack("01-infra").profiles == ("cpu",)
    assert host_env(plan)[postgres.URL_VARIABLE] == ""


@pytest.mark.parametrize("profile", PROFILES)
def test_postgres_adds_the_profile_to_01_infra_only(kit, profile):
    settings = settings_of(kit, AIRIG_BRAIN_STORE="postgres", POSTGRES_PASSWORD="pw-0123")
    plan = build_plan(settings, profile, [])
    assert plan.stack("01-infra").profiles == (profile, "postgres")
    assert [s.profiles for s in plan.stacks[1:]] == [(profile,), (profile,)]
    assert host_env(plan)[postgres.URL_VARIABLE] == (
        "postgresql://airig:pw-0123@postgres:5432/brain"
    )


def test_a_joined_rig_runs_no_database(kit):
    settings = settings_of(
        kit, AIRIG_BRAIN_STORE="postgres", POSTGRES_PASSWORD="pw",
        AIRIG_JOIN_BRAIN_URL="http://10.0.0.2:8080", AIRIG_JOIN_TOKEN="join-token",
    )  # fmt: skip
    plan = build_plan(settings, "cpu", [])
    assert plan.stack("01-infra").profiles == ("cpu",)
    assert host_env(plan)[postgres.URL_VARIABLE] == ""


def test_up_generates_the_password_once_and_preflight_wants_it(kit):
    (kit / ".env").write_text((kit / ".env.example").read_text())
    ensure_env(kit / ".env", kit / ".env.example")
    first = load_settings(kit).postgres_password
    assert len(first) >= 40 and first.isascii()
    ensure_env(kit / ".env", kit / ".env.example")
    assert load_settings(kit).postgres_password == first
    # an empty password is a preflight refusal with postgres, nothing without
    settings = settings_of(kit, AIRIG_BRAIN_STORE="postgres", POSTGRES_PASSWORD="")
    check = env_check(settings)
    assert not check.ok and "POSTGRES_PASSWORD" in check.detail
    assert env_check(settings_of(kit, POSTGRES_PASSWORD="")).ok
    with pytest.raises(ConfigError, match="POSTGRES_PASSWORD is empty"):
        postgres.database_url(settings)


# ------------------------------------------------------------------ the password
@pytest.mark.parametrize("password", [HOSTILE, "%41%", "@", "a" * 4096, "пароль-密码"])
def test_the_url_names_this_server_whatever_the_password(kit, monkeypatch, password):
    monkeypatch.setenv("POSTGRES_PASSWORD", password)  # the environment wins over .env
    settings = settings_of(kit, AIRIG_BRAIN_STORE="postgres")
    url = postgres.database_url(settings)
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port, parts.path) == (
        "postgresql", "postgres", 5432, "/brain",
    )  # fmt: skip
    assert parts.username == "airig" and unquote(parts.password or "") == password
    # only unreserved characters and escapes: nothing a .env line or Compose reads
    assert set(url.split("@", 1)[0]) <= set(
        "postgresql:/airig%0123456789ABCDEFabcdefghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ-._~"
    )
    # libpq's own reading of it (psycopg): the same password, this host and database
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(url) == {
        "user": "airig", "password": password, "host": "postgres", "port": "5432",
        "dbname": "brain",
    }  # fmt: skip


def test_host_env_is_private_and_the_dry_run_prints_no_password(kit, monkeypatch):
    password = "Pw-" + HOSTILE
    monkeypatch.setenv("POSTGRES_PASSWORD", password)
    settings = settings_of(kit, AIRIG_BRAIN_STORE="postgres")
    plan = build_plan(settings, "cpu", [])
    (kit / ".airig").mkdir()
    stale = kit / ".airig" / HOST_ENV
    stale.write_text("older kit\n")
    stale.chmod(0o644)
    Launcher(settings, docker=cast(Any, None), console=cast(Any, None)).write_generated(plan)
    assert stale.stat().st_mode & 0o777 == 0o600
    assert "postgresql://airig:Pw-p%40ss%3Aw%2Fo%25rd" in stale.read_text()
    for stack in ("01-infra", "02-compute", "03-agents"):
        assert (kit / stack / ".env").resolve().stat().st_mode & 0o777 == 0o600
    done = run(kit, "--dry-run", "--profile", "cpu", env={"POSTGRES_PASSWORD": password})
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "--profile postgres" in said  # 01-infra's database is in the plan …
    for secret in (password, "Pw-p%40ss", "Pw-p@ss"):  # … its password in no form
        assert secret not in said


# ------------------------------------------------------------------ the compose model
def compose_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


needs_compose = pytest.mark.skipif(
    not compose_available(), reason="docker compose v2 plugin not installed"
)


def config(stack, env: dict[str, str] | None = None) -> dict:
    cmd = ["docker", "compose"]
    for path in stack.files:
        cmd += ["-f", str(path)]
    for path in stack.env_files:
        cmd += ["--env-file", str(path)]
    for profile in stack.profiles:
        cmd += ["--profile", profile]
    cmd += ["-p", stack.project, "config", "--format", "json"]
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "POSTGRES_"))}
    done = subprocess.run(cmd, capture_output=True, text=True, env={**shell, **(env or {})})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def written(settings, profile: str):
    gpus = [GpuSlot(0, gids=(993,))] if profile != "cpu" else []
    plan = build_plan(settings, profile, gpus, amd_host_env([993]))
    for path, text in plan.generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return plan


@needs_compose
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("profile", PROFILES)
def test_every_stack_and_profile_validates_with_the_database_on_and_off(kit, profile, store):
    settings = settings_of(kit, AIRIG_BRAIN_STORE=store, POSTGRES_PASSWORD="pw-0123")
    plan = written(settings, profile)
    infra = config(plan.stack("01-infra"))
    agents = config(plan.stack("03-agents"))
    config(plan.stack("02-compute"))
    brain_url = agents["services"]["brain"]["environment"]["BRAIN_DATABASE_URL"]
    if store == "sqlite":
        assert "postgres" not in infra["services"] and brain_url == ""
        return
    database = infra["services"]["postgres"]
    assert database["image"] == "postgres:17"
    assert database["environment"]["POSTGRES_PASSWORD"] == "pw-0123"
    assert brain_url == "postgresql://airig:pw-0123@postgres:5432/brain"
    assert "ports" not in database  # on ai-network only: the brain is its one client
    assert database["networks"] == {"ai": None}
    assert database["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert database["cap_drop"] == ["ALL"] and "cap_add" not in database
    assert database["read_only"] is True and database["user"] == "999:999"
    assert "no-new-privileges:true" in database["security_opt"]
    assert database["logging"]["options"]["max-size"]
    mount = database["volumes"][0]
    assert (mount["source"], mount["target"]) == ("brain-postgres", postgres.DUMP_DIR)
    assert infra["volumes"]["brain-postgres"]["name"] == "airig-brain-postgres"
    assert database["environment"]["PGDATA"].startswith(postgres.DUMP_DIR + "/")


@needs_compose
def test_compose_and_the_launcher_read_a_hostile_password_alike(kit, monkeypatch):
    """The server's password is Compose's reading of POSTGRES_PASSWORD, the brain's URL the
    launcher's: through the environment (where Compose interpolates nothing) they agree,
    every special character included."""
    monkeypatch.setenv("POSTGRES_PASSWORD", HOSTILE)
    settings = settings_of(kit, AIRIG_BRAIN_STORE="postgres")
    plan = written(settings, "cpu")
    env = {"POSTGRES_PASSWORD": HOSTILE}
    server = config(plan.stack("01-infra"), env)["services"]["postgres"]["environment"]
    brain = config(plan.stack("03-agents"), env)["services"]["brain"]["environment"]
    # `config` writes a compose file, where `$` is spelled `$$`; the container gets `$`
    assert server["POSTGRES_PASSWORD"].replace("$$", "$") == HOSTILE
    assert unquote(urlsplit(brain["BRAIN_DATABASE_URL"]).password or "") == HOSTILE


@needs_compose
def test_an_older_env_without_the_new_keys_still_parses(kit):
    """`status` and `down` on a kit whose .env predates the knob: no POSTGRES_PASSWORD at
    all must not stop Compose from reading 01-infra (a service of an inactive profile is
    interpolated too)."""
    settings = settings_of(kit)
    lines = (kit / ".env").read_text().splitlines()
    kept = [line for line in lines if not line.startswith(("POSTGRES_", "AIRIG_BRAIN_STORE"))]
    (kit / ".env").write_text("\n".join(kept) + "\n")
    plan = written(load_settings(kit), "cpu")
    assert "postgres" not in config(plan.stack("01-infra"))["services"]
    assert settings.brain_store == "sqlite"


# ------------------------------------------------------------------ helpers
def run(kit: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("AIRIG_", "POSTGRES_"))}
    shell.update(AIRIG_HOME=str(kit), COLUMNS="200", DOCKER_HOST="unix:///nonexistent.sock")
    return subprocess.run(
        [sys.executable, str(ROOT / "start_services.py"), *args],
        capture_output=True, text=True, env={**shell, **(env or {})},
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
