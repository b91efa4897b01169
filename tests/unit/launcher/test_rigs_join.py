"""A second rig joining: URL rules, the brain checks before anything starts, the compose
plan of a joined rig, worker names, `token` commands and `status` showing hosts."""

from __future__ import annotations

import io
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import brain_helpers as h
import pytest
import yaml
from fastapi.testclient import TestClient
from rich.console import Console
from support import one_error, run_cli

from airig.brain.api.app import create_app
from airig.common.errors import ConfigError
from airig.launcher.compose.container import ContainerState
from airig.launcher.compose.docker import Docker, group_states
from airig.launcher.compose.plan import GpuSlot, build_plan
from airig.launcher.envfile import read_env, set_values
from airig.launcher.lifecycle.join import check_brain, check_brain_url, join_command
from airig.launcher.lifecycle.up import Launcher
from airig.launcher.settings import load_settings

ADMIN = {"Authorization": "Bearer admin-secret-token"}
BRAIN = "https://brain.example.lan"


# ------------------------------------------------------------------ fixtures
@pytest.fixture
def kit(launcher_kit) -> Path:
    return launcher_kit


def join_token(client, name="rig-b") -> dict:
    return client.post("/v1/tokens", headers=ADMIN, json={"scope": "join", "name": name}).json()


class Untouchable(Docker):
    """An engine adapter that records every call: `join` must not reach it on bad input."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __getattribute__(self, name):
        if not name.startswith("_") and name not in ("calls",):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


# ------------------------------------------------------------------ URL rules
@pytest.mark.parametrize(
    "url,normalised",
    [
        ("https://brain.example.lan", "https://brain.example.lan"),
        ("https://brain.example.lan:8443/airig/", "https://brain.example.lan:8443/airig"),
        ("https://192.168.1.10", "https://192.168.1.10"),
    ],
)
def test_https_to_any_host_is_accepted(url, normalised):
    assert check_brain_url(url) == normalised


@pytest.mark.parametrize(
    "url", ["http://192.168.1.10:8080", "http://brain.example.lan", "http://172.17.0.1:8080"]
)
def test_plain_http_to_another_machine_needs_insecure(url):
    with pytest.raises(ConfigError, match="unencrypted") as refused:
        check_brain_url(url)
    assert "reverse proxy" in refused.value.hint and "--insecure" in refused.value.hint
    assert check_brain_url(url, insecure=True) == url


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "http://localhost:8080", "https://[::1]:8080"]
)
def test_loopback_is_refused_because_containers_cannot_reach_it(url):
    # Plain http to loopback would leave nothing unencrypted on a network, but the
    # workers run in containers, where 127.0.0.1 is the container itself.
    with pytest.raises(ConfigError, match="loopback") as refused:
        check_brain_url(url, insecure=True)
    assert "172.17.0.1" in refused.value.hint


@pytest.mark.parametrize(
    "url",
    ["ftp://brain", "brain.example.lan:8080", "https://", "https://h:99999",
     "https://user:pw@brain.example.lan", "https://brain.example.lan/?token=x"],
)  # fmt: skip
def test_urls_that_cannot_work_are_refused(url):
    with pytest.raises(ConfigError):
        check_brain_url(url, insecure=True)


# ------------------------------------------------------------------ brain checks
def test_check_brain_takes_only_a_live_join_token(brain):
    made = join_token(brain)
    assert check_brain(BRAIN, made["token"]) == "rig-b"
    submit = brain.post("/v1/tokens", headers=ADMIN, json={"scope": "submit"}).json()
    with pytest.raises(ConfigError, match="submit token, not a join token"):
        check_brain(BRAIN, submit["token"])
    with pytest.raises(ConfigError, match="refused this join token"):
        check_brain(BRAIN, "not-a-token-the-brain-knows")
    brain.delete(f"/v1/tokens/{made['id']}", headers=ADMIN)
    with pytest.raises(ConfigError, match="refused this join token"):
        check_brain(BRAIN, made["token"])
    with pytest.raises(ConfigError, match="cannot reach the brain"):
        check_brain("https://elsewhere.example.lan", made["token"])


def test_a_server_that_is_not_a_brain_never_sees_the_token(monkeypatch):
    """A mistyped URL (another web server) must not receive the join token."""
    seen = []

    class NotFound:
        status_code = 404

        def json(self):
            return {"error": "no such page"}

    def get(url, headers=None, timeout=None):
        seen.append((url, dict(headers or {})))
        return NotFound()

    monkeypatch.setattr("airig.launcher.lifecycle.join.requests.get", get)
    with pytest.raises(ConfigError, match="does not answer like an airig brain"):
        check_brain("https://wiki.example.lan", "join-token-123456")
    assert seen == [("https://wiki.example.lan/health", {})]


def test_a_degraded_brain_is_said_as_such_and_never_sees_the_token(monkeypatch):
    """A brain whose store is full answers /health 503 "degraded" (issue 36 §5): the
    user is told that, with the fix, not that the URL is no airig brain."""
    seen = []

    class Degraded:
        status_code = 503

        def json(self):
            return {"status": "degraded", "store": "full" * 50, "free": "1.2 MiB"}

    def get(url, headers=None, timeout=None):
        seen.append(url)
        return Degraded()

    monkeypatch.setattr("airig.launcher.lifecycle.join.requests.get", get)
    with pytest.raises(ConfigError) as caught:
        check_brain("https://brain.example.lan", "join-token-123456")
    assert "is degraded: its store is full" in caught.value.message
    assert "1.2 MiB free" in caught.value.message and len(caught.value.message) < 200
    assert "free space" in caught.value.hint
    assert seen == ["https://brain.example.lan/health"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--brain", "http://10.1.2.3:8080"], ["plain http", "10.1.2.3"]),
        (["--brain", "https://elsewhere.example.lan"], ["cannot reach the brain"]),
        (["--brain", BRAIN, "--token", "wrong-token-123"], ["refused this join token"]),
        (["--brain", "http://127.0.0.1:8080", "--insecure"], ["loopback"]),
        (["--brain", BRAIN, "--token", "has space"], ["does not look like a join token"]),
    ],
)
def test_bad_join_input_is_one_line_and_starts_nothing(kit, brain, monkeypatch, capsys,
                                                       args, words):  # fmt: skip
    token = join_token(brain)["token"]
    if "--token" not in args:
        args = [*args, "--token", token]
    docker = Untouchable()
    code, _, err = run_cli(monkeypatch, capsys, docker, "join", *args)
    one_error(code, err, *words)
    assert docker.calls == []
    assert not (kit / ".env").exists() and not (kit / ".airig").exists()


def test_a_revoked_join_token_is_refused_before_anything_starts(kit, brain, monkeypatch, capsys):
    made = join_token(brain)
    brain.delete(f"/v1/tokens/{made['id']}", headers=ADMIN)
    docker = Untouchable()
    code, _, err = run_cli(monkeypatch, capsys, docker, "join", "--brain", BRAIN,
                           "--token", made["token"])  # fmt: skip
    one_error(code, err, "revoked")
    assert "token create --join" in err
    assert docker.calls == []


def test_join_dry_run_shows_a_rig_without_brain(kit, brain, monkeypatch, capsys):
    token = join_token(brain)["token"]
    code, out, err = run_cli(monkeypatch, capsys, Docker(), "join",
                             "--brain", "http://10.1.2.3:8080", "--token", token, "--insecure",
                             "--profile", "cpu", "--dry-run")  # fmt: skip
    assert code == 0, err
    agents = next(line for line in out.splitlines() if "airig-agents" in line and " up " in line)
    assert "03-agents/compose.join.yaml" in agents
    build = next(line for line in out.splitlines() if " build " in line)
    assert build.split()[-1] != "brain" and "worker-cpu" in build
    assert token not in out  # the token goes to .env, never to the screen
    assert not (kit / ".env").exists()  # a dry run writes nothing


DRY_JOIN = ("join", "--brain", "http://10.1.2.3:8080", "--insecure", "--profile", "cpu",
            "--dry-run")  # fmt: skip


class Terminal(io.StringIO):
    """A stdin that is a terminal: `join` may ask for the token there."""

    def isatty(self) -> bool:
        return True


def argv_notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if "--token-file" in line]


@pytest.mark.parametrize("way", ["environment", "file", "prompt"])
def test_the_join_token_need_not_be_on_the_command_line(kit, brain, monkeypatch, capsys,
                                                        tmp_path, way):  # fmt: skip
    """`ps` and the shell's history show a command line: the token can come from
    AIRIG_JOIN_TOKEN, a file, or a hidden prompt instead."""
    token = join_token(brain)["token"]
    args, asked = list(DRY_JOIN), []
    monkeypatch.setattr("sys.stdin", Terminal())
    if way == "environment":
        monkeypatch.setenv("AIRIG_JOIN_TOKEN", token)
    elif way == "file":
        (tmp_path / "join-token").write_text(f"{token}\n")
        args += ["--token-file", str(tmp_path / "join-token")]
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or token)
    code, out, err = run_cli(monkeypatch, capsys, Docker(), *args)
    assert code == 0, err
    assert "03-agents/compose.join.yaml" in out and token not in out + err
    assert argv_notes(out + err) == []
    assert len(asked) == (way == "prompt")  # asked only when nothing else gave it


def test_a_token_on_the_command_line_works_and_says_once_where_else_it_can_come_from(
    kit, brain, monkeypatch, capsys
):
    token = join_token(brain)["token"]
    code, out, err = run_cli(monkeypatch, capsys, Docker(), *DRY_JOIN, "--token", token)
    assert code == 0, err
    [note] = argv_notes(out + err)
    assert "AIRIG_JOIN_TOKEN" in note and "ps" in note and token not in out + err


@pytest.mark.parametrize(
    "args,words",
    [
        ([], ["no join token"]),
        (["--token-file", "/nonexistent/join-token"], ["cannot read", "/nonexistent/join-token"]),
        (["--token", "join-token-123456", "--token-file", "/etc/hostname"], ["--token-file"]),
    ],
)
def test_a_missing_or_unreadable_token_is_one_line_and_starts_nothing(
    kit, brain, monkeypatch, capsys, args, words
):
    monkeypatch.delenv("AIRIG_JOIN_TOKEN", raising=False)
    docker = Untouchable()
    code, _, err = run_cli(monkeypatch, capsys, docker, "join", "--brain", BRAIN, *args)
    line = one_error(code, err, *words)
    assert "AIRIG_JOIN_TOKEN" in err or "--token" in line
    assert docker.calls == [] and not (kit / ".env").exists()


def test_a_rig_running_its_own_brain_cannot_join(kit, brain, monkeypatch, capsys):
    class BrainHere(Untouchable):
        def services(self, stack):
            return [ContainerState("brain", "airig-agents-brain-1", "running", "healthy", None, [])]

    docker = BrainHere()
    code, _, err = run_cli(monkeypatch, capsys, docker, "join", "--brain", BRAIN,
                           "--token", join_token(brain)["token"])  # fmt: skip
    one_error(code, err, "runs its own brain")
    assert "down" in err
    assert "up" not in docker.calls and "ensure_network" not in docker.calls
    assert read_env(kit / ".env")["AIRIG_JOIN_BRAIN_URL"] == ""


def test_a_failed_join_puts_env_back(kit, brain, monkeypatch, capsys):
    from airig.common.errors import DockerError

    before = {"AIRIG_JOIN_BRAIN_URL": "", "AIRIG_JOIN_TOKEN": ""}

    class Quiet(Untouchable):
        def services(self, stack):
            return []

    def fails(self, dry_run=False):
        assert read_env(self.settings.env_file)["AIRIG_JOIN_BRAIN_URL"] == BRAIN
        raise DockerError("03-agents: worker-cpu failed to start", "read the log lines above")

    monkeypatch.setattr(Launcher, "up", fails)
    code, _, err = run_cli(monkeypatch, capsys, Quiet(), "join", "--brain", BRAIN,
                           "--token", join_token(brain)["token"])  # fmt: skip
    one_error(code, err, "worker-cpu failed")
    env = read_env(kit / ".env")
    assert {k: env[k] for k in before} == before


# ------------------------------------------------------------------ compose plan
def joined_settings(kit, **extra):
    values = {"AIRIG_JOIN_BRAIN_URL": BRAIN, "AIRIG_JOIN_TOKEN": "join-token-123456",
              "AIRIG_RIG_NAME": "rig-b", **extra}  # fmt: skip
    (kit / ".env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return load_settings(kit)


def test_a_joined_rigs_compose_model_has_no_brain_and_the_remote_url(kit):
    plan = build_plan(joined_settings(kit), "cpu", [])
    agents = plan.stack("03-agents")
    assert agents.files == (kit / "03-agents/compose.yaml", kit / "03-agents/compose.join.yaml")
    overlay = yaml.safe_load(agents.files[1].read_text())
    # the brain is switched off by a profile nobody enables
    assert overlay == {"services": {"brain": {"profiles": ["joined-rig-runs-no-brain"]}}}
    assert "joined-rig-runs-no-brain" not in ("cpu", "gpu-nvidia", "gpu-amd")
    worker = yaml.safe_load(agents.files[0].read_text())["services"]["worker-cpu"]
    assert worker["environment"]["BRAIN_URL"] == "${AIRIG_JOIN_BRAIN_URL:-http://brain:8080}"
    assert worker["environment"]["WORKER_BOOTSTRAP_TOKEN"].startswith("${AIRIG_JOIN_TOKEN:-")
    assert worker["depends_on"]["brain"]["required"] is False
    assert plan.join_brain_url == BRAIN
    host_env = plan.generated[kit / ".airig" / "host.env"]
    assert "AIRIG_RIG_NAME=rig-b\n" in host_env and "AIRIG_WORKER_NAME_PREFIX=rig-b-\n" in host_env


def test_a_rig_with_its_own_brain_keeps_it_and_unprefixed_names(kit):
    (kit / ".env").write_text("AIRIG_RIG_NAME=rig-a\n")
    plan = build_plan(load_settings(kit), "cpu", [])
    assert plan.stack("03-agents").files == (kit / "03-agents/compose.yaml",)
    host_env = plan.generated[kit / ".airig" / "host.env"]
    assert "AIRIG_RIG_NAME=rig-a\n" in host_env and "AIRIG_WORKER_NAME_PREFIX=\n" in host_env


def test_a_second_kit_on_one_engine_has_its_own_projects_and_volumes(kit):
    settings = joined_settings(kit, AIRIG_PROJECT_PREFIX="rigb", AIRIG_NETWORK="ai-b")
    plan = build_plan(settings, "gpu-nvidia", [GpuSlot(0)])
    assert [s.project for s in plan.stacks] == ["rigb-infra", "rigb-compute", "rigb-agents"]
    assert plan.network == "ai-b"
    overlay = yaml.safe_load(plan.generated[kit / ".airig" / "agents.gpu.yaml"])
    assert overlay["volumes"]["ollama-models"]["name"] == "rigb-ollama-models"
    for stack in ("01-infra", "02-compute", "03-agents"):
        model = yaml.safe_load((kit / stack / "compose.yaml").read_text())
        assert model["name"].startswith("${AIRIG_PROJECT_PREFIX:-airig}-")
        for volume in model["volumes"].values():
            assert volume["name"].startswith("${AIRIG_PROJECT_PREFIX:-airig}-")


def test_own_ports_and_down_see_only_this_rigs_projects(kit):
    settings = joined_settings(kit, AIRIG_PROJECT_PREFIX="rigb")

    def listed(project, port):  # one entry of the engine's container list
        return {"Names": [f"/{project}-x-1"], "State": "running", "Status": "Up 1 minute",
                "Labels": {"com.docker.compose.project": project},
                "Ports": [{"IP": "0.0.0.0", "PrivatePort": 8080, "PublicPort": port,
                           "Type": "tcp"}]}  # fmt: skip

    class Engine(Untouchable):
        removed: list = []

        def project_services(self, projects):
            rows = [listed("airig-agents", 8080), listed("rigb-infra", 18090)]
            return group_states(rows, list(projects))

        def down(self, stack):
            pass

        def remove_volumes(self, names):
            self.removed = names
            return names

        def remove_network(self, name):
            return f"network {name} removed"

    engine = Engine()
    launcher = Launcher(settings, engine, Console(file=io.StringIO()))
    # another rig's 8080 on this engine is a clash, not "already up"
    assert launcher.own_ports() == {18090}
    launcher.down(build_plan(settings, "cpu", []), volumes=True, keep_models=True)
    assert engine.removed == [
        "rigb-data", "rigb-results", "rigb-brain-state", "rigb-comfyui-custom-nodes",
        "rigb-comfyui-input", "rigb-comfyui-output", "rigb-comfyui-user", "rigb-brain-postgres",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "env,why",
    [
        ("AIRIG_JOIN_BRAIN_URL=https://b\n", "set together"),
        ("AIRIG_PROJECT_PREFIX=Rig B\n", "AIRIG_PROJECT_PREFIX"),
        ("AIRIG_RIG_NAME=rig/b\n", "AIRIG_RIG_NAME"),
    ],
)
def test_rig_settings_are_checked(kit, monkeypatch, capsys, env, why):
    (kit / ".env").write_text(env)
    code, _, err = run_cli(monkeypatch, capsys, Untouchable(), "status")
    one_error(code, err, why)


# ------------------------------------------------------------------ worker names
def test_a_joined_rigs_workers_are_prefixed_and_tell_their_host(monkeypatch):
    from airig.worker.settings import WorkerSettings

    for key in ("WORKER_NAME", "WORKER_NAME_PREFIX", "WORKER_HOST"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORKER_NAME", "gpu0")
    alone = WorkerSettings()
    assert (alone.name, alone.host) == ("gpu0", socket.gethostname())
    monkeypatch.setenv("WORKER_NAME_PREFIX", "rig-b-")
    monkeypatch.setenv("WORKER_HOST", "rig-b")
    settings = WorkerSettings()
    assert (settings.name, settings.host) == ("rig-b-gpu0", "rig-b")


def test_a_worker_whose_join_token_was_revoked_stops_with_one_line(tmp_path, monkeypatch):
    """401 at registration is not a lost worker token: retrying cannot help."""
    from airig.common.protocol import RegisterRequest
    from airig.worker.link import BrainLink

    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        made = join_token(client)
        link = BrainLink("http://brain", made["token"])

        class Session:
            def request(self, method, url, headers=None, timeout=None, **kwargs):
                return client.request(method, urlsplit(url).path, headers=headers, **kwargs)

        link._local.session = Session()
        request = RegisterRequest(name="rig-b-cpu", host="rig-b")
        assert link.register(request, threading.Event()).worker_id == "rig-b-cpu"
        client.delete(f"/v1/tokens/{made['id']}", headers=ADMIN)
        with pytest.raises(ConfigError, match="revoked join token"):
            link.register(request, threading.Event())


def test_a_worker_whose_name_belongs_to_another_rig_stops_with_one_line(tmp_path):
    """409 without Retry-After at registration: the name is another rig's, and waiting
    cannot change that (a live holder's 409 carries Retry-After and is waited out)."""
    from airig.common.protocol import RegisterRequest
    from airig.worker.link import BrainLink, RegistrationRefused

    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        links = [BrainLink("http://brain", join_token(client, rig)["token"]) for rig in "bc"]

        class Session:
            def request(self, method, url, headers=None, timeout=None, **kwargs):
                return client.request(method, urlsplit(url).path, headers=headers, **kwargs)

        for link in links:
            link._local.session = Session()
        request = RegisterRequest(name="rig-b-cpu", host="rig-b")
        assert links[0].register(request, threading.Event()).worker_id == "rig-b-cpu"
        with pytest.raises(RegistrationRefused, match="belongs to another rig"):
            links[1].register(request, threading.Event())


# ------------------------------------------------------------------ token commands
def test_token_create_join_prints_the_token_once_and_the_join_command(kit, brain, monkeypatch,
                                                                      capsys):  # fmt: skip
    (kit / ".env").write_text(
        "BRAIN_ADMIN_TOKEN=admin-secret-token\nAIRIG_BIND_ADDRESS=10.1.2.3\nBRAIN_PORT=8080\n"
    )
    code, out, err = run_cli(monkeypatch, capsys, Untouchable(), "token", "create", "--join",
                             "--name", "garage")  # fmt: skip
    assert code == 0, err
    listed = brain.get("/v1/tokens", headers=ADMIN).json()["tokens"]
    assert [(t["scope"], t["name"]) for t in listed] == [("join", "garage")]
    command = next(line.strip() for line in out.splitlines() if " join --brain " in line)
    token = command.split("--token ")[1].split()[0]
    assert command == (
        f"python start_services.py join --brain http://10.1.2.3:8080 --token {token} --insecure"
    )
    assert out.count(token) == 2  # the token line and the command
    assert check_brain("http://10.1.2.3:8080", token) == "garage"
    assert f"token revoke {listed[0]['id']}" in out

    code, out, _ = run_cli(monkeypatch, capsys, Untouchable(), "token", "list")
    assert code == 0 and listed[0]["id"] in out and "garage" in out and token not in out
    code, out, _ = run_cli(monkeypatch, capsys, Untouchable(), "token", "revoke", listed[0]["id"])
    assert code == 0 and "revoked" in out
    code, _, err = run_cli(monkeypatch, capsys, Untouchable(), "token", "revoke", "nope")
    one_error(code, err, "no token nope")
    assert "token list" in err


def test_token_create_warns_when_no_other_machine_can_reach_the_brain(kit, brain, monkeypatch,
                                                                      capsys):  # fmt: skip
    (kit / ".env").write_text("BRAIN_ADMIN_TOKEN=admin-secret-token\n")
    code, out, _ = run_cli(monkeypatch, capsys, Untouchable(), "token", "create", "--join")
    assert code == 0
    assert "published on 127.0.0.1 only" in out and "AIRIG_BIND_ADDRESS" in out


def test_the_join_command_uses_the_public_url_without_insecure(kit):
    (kit / ".env").write_text("AIRIG_BRAIN_PUBLIC_URL=https://brain.example.lan/\n")
    command, warnings = join_command(load_settings(kit), "T0KEN")
    assert command == f"python start_services.py join --brain {BRAIN} --token T0KEN"
    assert warnings == []


def test_token_commands_on_a_joined_rig_point_to_the_brains_machine(kit, monkeypatch, capsys):
    joined_settings(kit)
    code, _, err = run_cli(monkeypatch, capsys, Untouchable(), "token", "list")
    one_error(code, err, "joined the brain at")


def test_token_create_needs_a_purpose(kit, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, Untouchable(), "token", "create")
    one_error(code, err, "what the token is for")


# ------------------------------------------------------------------ status, client, .env
def test_status_shows_each_workers_host(tmp_path):
    from airig.launcher.views.status import workers_table

    settings = h.make_settings(tmp_path, BRAIN_CLAIM_WAIT_S=0)
    with TestClient(create_app(settings)) as client:
        made = join_token(client)
        for name, host, token in (("gpu0", "rig-a", "bootstrap-secret-token"),
                                  ("rig-b-gpu0", "rig-b", made["token"])):  # fmt: skip
            body = {"name": name, "host": host, "classes": ["llm"], "gpu_index": 0}
            headers = {"Authorization": f"Bearer {token}"}
            assert client.post("/v1/workers/register", headers=headers, json=body).is_success
        workers = client.get("/v1/workers", headers=ADMIN).json()["workers"]
    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(workers_table(workers))
    text = out.getvalue()
    assert "host" in text.splitlines()[2]
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in
            text.splitlines() if line.count("│") > 3 and "gpu0" in line}  # fmt: skip
    assert rows == {"gpu0": "rig-a", "rig-b-gpu0": "rig-b"}


def test_the_cli_reaches_a_brain_published_on_a_chosen_address(tmp_path, monkeypatch):
    from airig.launcher.brain_client import brain_url

    monkeypatch.delenv("BRAIN_URL", raising=False)
    monkeypatch.delenv("AIRIG_BIND_ADDRESS", raising=False)
    env = tmp_path / ".env"
    env.write_text("AIRIG_BIND_ADDRESS=172.17.0.1\nBRAIN_PORT=18080\n")
    assert brain_url(load_settings(tmp_path)) == "http://172.17.0.1:18080"
    env.write_text("AIRIG_BIND_ADDRESS=0.0.0.0\n")
    assert brain_url(load_settings(tmp_path)) == "http://127.0.0.1:8080"
    env.write_text("AIRIG_BIND_ADDRESS=fd00::5\n")
    assert brain_url(load_settings(tmp_path)) == "http://[fd00::5]:8080"


def test_set_values_replaces_every_occurrence_and_keeps_the_file_private(tmp_path):
    env = tmp_path / ".env"
    env.write_text("# AIRIG_JOIN_TOKEN=example\nAIRIG_JOIN_TOKEN=\nA=1\nAIRIG_JOIN_TOKEN=old\n")
    set_values(env, {"AIRIG_JOIN_TOKEN": "new-token", "AIRIG_JOIN_BRAIN_URL": "https://b"})
    assert read_env(env) == {
        "AIRIG_JOIN_TOKEN": "new-token", "A": "1", "AIRIG_JOIN_BRAIN_URL": "https://b",
    }  # fmt: skip
    assert env.read_text().startswith("# AIRIG_JOIN_TOKEN=example\n")
    assert env.stat().st_mode & 0o777 == 0o600
