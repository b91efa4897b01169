"""Two brains in the kit (issue 38): AIRIG_BRAINS=2 starts 03-agents' brain-2 beside brain,
on the same PostgreSQL store, under the same name on ai-network; on SQLite it is refused
before anything starts.

The compose model is checked with `docker compose config` (the compose binary only, no
engine), as test_postgres_kit.py does."""

from __future__ import annotations

import os

import pytest
from support import one_error, write_env
from test_postgres_kit import config, needs_compose, run, written

from airig.common.errors import ConfigError
from airig.launcher.compose.plan import BRAINS_PROFILE, build_plan
from airig.launcher.settings import PROFILES, load_settings

PG = {"AIRIG_BRAIN_STORE": "postgres", "POSTGRES_PASSWORD": "pw-0123"}


@pytest.fixture(autouse=True)
def no_shell_settings(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("AIRIG_", "POSTGRES_"))]:
        monkeypatch.delenv(key)


def settings_of(kit, **values: str):
    write_env(kit, **values)
    return load_settings(kit)


@pytest.mark.parametrize("store", ["sqlite", ""])
def test_two_brains_on_sqlite_are_refused_with_the_fix(kit, store):
    """Two processes on one SQLite file would each take itself for the one writer."""
    with pytest.raises(ConfigError) as refused:
        settings_of(kit, AIRIG_BRAINS="2", AIRIG_BRAIN_STORE=store)
    assert refused.value.message == (
        "AIRIG_BRAINS=2 needs the store on a server, but AIRIG_BRAIN_STORE is sqlite"
    )
    assert "AIRIG_BRAIN_STORE=postgres" in refused.value.hint
    assert "migrate-store" in refused.value.hint


def test_the_cli_refuses_two_brains_on_sqlite_in_one_line_and_writes_nothing(kit):
    write_env(kit, AIRIG_BRAINS="2")
    done = run(kit, "--dry-run", "--profile", "cpu")
    one_error(done.returncode, done.stderr, "AIRIG_BRAINS=2", "AIRIG_BRAIN_STORE")
    assert not (kit / ".airig" / "host.env").exists()


@pytest.mark.parametrize("value", ["0", "3", "-1", "two", "1.5", "2\x00", "9" * 400])
def test_a_count_out_of_range_is_one_line(kit, value):
    with pytest.raises(ConfigError) as refused:
        settings_of(kit, AIRIG_BRAINS=value, **PG)
    assert refused.value.message.startswith("AIRIG_BRAINS=")
    assert refused.value.hint == "set AIRIG_BRAINS to 1 or 2"


@pytest.mark.parametrize("value", [None, "", "1"])
def test_one_brain_is_the_default_and_adds_no_profile(kit, value):
    extra = {} if value is None else {"AIRIG_BRAINS": value}
    settings = settings_of(kit, **PG, **extra)
    assert settings.brains == 1
    plan = build_plan(settings, "cpu", [])
    assert BRAINS_PROFILE not in plan.stack("03-agents").profiles


@pytest.mark.parametrize("profile", PROFILES)
def test_two_brains_add_the_profile_to_03_agents_only(kit, profile):
    settings = settings_of(kit, AIRIG_BRAINS="2", **PG)
    plan = build_plan(settings, profile, [])
    assert plan.stack("03-agents").profiles == (profile, BRAINS_PROFILE)
    assert plan.stack("01-infra").profiles == (profile, "postgres")
    assert plan.stack("02-compute").profiles == (profile,)


def test_a_joined_rig_runs_no_brain_of_its_own_whatever_the_count(kit):
    """Its workers use the other machine's brain: AIRIG_BRAINS there is that rig's."""
    settings = settings_of(
        kit, AIRIG_BRAINS="2",
        AIRIG_JOIN_BRAIN_URL="http://10.0.0.2:8080", AIRIG_JOIN_TOKEN="join-token",
    )  # fmt: skip
    plan = build_plan(settings, "cpu", [])
    assert plan.stack("03-agents").profiles == ("cpu",)


@needs_compose
@pytest.mark.parametrize("profile", PROFILES)
def test_brain_2_is_brain_on_the_same_store_off_the_hosts_port(kit, profile):
    settings = settings_of(kit, AIRIG_BRAINS="2", **PG)
    agents = config(written(settings, profile).stack("03-agents"))["services"]
    brain, second = agents["brain"], agents["brain-2"]
    # the same program, image, limits and health check: a second of the same brain
    for key in ("image", "command", "healthcheck", "mem_limit", "pids_limit", "read_only",
                "cap_drop", "security_opt", "restart", "volumes"):  # fmt: skip
        assert second[key] == brain[key], key
    # one name on ai-network for both: the workers' http://brain:8080 reaches either
    assert second["networks"] == brain["networks"] == {"ai": {"aliases": ["brain"]}}
    # the same store (the server), its own folder on the state volume for its files
    env, env2 = brain["environment"], second["environment"]
    assert env2["BRAIN_DATABASE_URL"] == env["BRAIN_DATABASE_URL"]
    assert env["BRAIN_DATABASE_URL"].startswith("postgresql://airig:")
    assert (env["BRAIN_DB"], env2["BRAIN_DB"]) == ("/state/brain.db", "/state/brain-2/brain.db")
    assert {k: v for k, v in env2.items() if k != "BRAIN_DB"} == {
        k: v for k, v in env.items() if k != "BRAIN_DB"
    }
    # the host's port is brain's: a second binding of it could never start
    assert brain["ports"][0]["published"] == "8080"
    assert not second.get("ports")
    # the workers wait for brain, which is healthy before either serves them
    assert agents["worker-cpu"]["depends_on"]["brain"]["condition"] == "service_healthy"


@needs_compose
def test_one_brain_leaves_brain_2_out_of_the_model(kit):
    settings = settings_of(kit, **PG)
    agents = config(written(settings, "cpu").stack("03-agents"))["services"]
    assert "brain" in agents and "brain-2" not in agents
