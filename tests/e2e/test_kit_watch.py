"""The whole kit, watched as a user would see it (issue 22).

Other e2e tests check the one thing they are about. This one checks invariants of the
whole running kit, over long enough for the kit's own timers to fire (the brain's service
probes, its alert pass, worker heartbeats and leases, retention), and again after a plan
that uses every executor:

- no alert fired (the brain's events, and nothing delivered to the webhook that
  ``AIRIG_ALERT_URLS`` points at on the host through ``host.docker.internal``);
- no container restarted (``RestartCount`` 0) and no init container failed;
- no ``ERROR`` / ``Traceback`` / ``"level": "error"`` line in any container's log;
- ``triage`` clean and ``status`` all healthy;

and then ``down``: every container stopped by its stop signal within its grace period (no
exit 137, seen on the engine's own ``die`` events), nothing left behind (containers, the
network, generated files under ``.airig/``, the stack folders' ``.env`` links).
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

pytestmark = [pytest.mark.docker, pytest.mark.slow]
BRAIN = "http://127.0.0.1:8080"
PROJECTS = ("airig-infra", "airig-compute", "airig-agents")
PROBE_INTERVAL_S = 3
DOWN_AFTER = 3
# Idle for more than DOWN_AFTER + 1 probe rounds, and past one worker lease (30 s), so a
# false service_down or worker_down would have fired.
IDLE_S = max((DOWN_AFTER + 2) * PROBE_INTERVAL_S, 40)
# A plain-text ERROR (stand-ins, uvicorn's own format) or a JSON log line of level error;
# not the logger name "uvicorn.error", which every uvicorn line carries.
BAD_LINE = re.compile(r'Traceback|\bERROR\b|"level":\s*"(?i:error|critical)"')


class Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            Hook.received.append({**json.loads(body or b"{}"), "_from": self.client_address[0]})
        except ValueError:
            Hook.received.append({"raw": body.decode("utf-8", "replace")})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def webhook():
    # On every interface: the brain reaches the host through host.docker.internal (the
    # docker bridge's gateway address), which is on this machine.
    server = ThreadingHTTPServer(("0.0.0.0", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="module")
def watched_kit(tmp_path_factory, test_images, webhook):
    from conftest import Kit, copy_kit, force_clean, write_test_env

    force_clean()
    root = copy_kit(tmp_path_factory.mktemp("kit") / "airig")
    write_test_env(
        root,
        AIRIG_OLLAMA_MODELS="qwen2.5:0.5b,nomic-embed-text,qwen2.5vl:7b",
        AIRIG_WHISPER_MODELS="Systran/faster-whisper-tiny",
        AIRIG_PLANNER_MODEL="qwen2.5:0.5b",
        AIRIG_VISION_MODEL="qwen2.5vl:7b",
        AIRIG_EMBED_MODEL="nomic-embed-text",
        AIRIG_ALERT_URLS=f"json://host.docker.internal:{webhook}/hook",
        BRAIN_PROBE_INTERVAL_S=str(PROBE_INTERVAL_S),
        BRAIN_PROBE_DOWN_AFTER=str(DOWN_AFTER),
        BRAIN_RETENTION_INTERVAL_S="10",
    )
    kit = Kit(root)
    done = kit.run("--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    yield kit
    kit.run("down", "--volumes", "--yes")
    force_clean()


def auth(kit) -> dict:
    return {"Authorization": f"Bearer {kit.env()['BRAIN_ADMIN_TOKEN']}"}


def alerts(kit) -> list[tuple[str, str, str, str]]:
    found = []
    for kind in ("alert_fired", "alert_cleared"):
        answer = requests.get(
            f"{BRAIN}/v1/events", params={"type": kind, "limit": 500}, headers=auth(kit),
            timeout=10,
        )  # fmt: skip
        answer.raise_for_status()
        found += [
            (e["event_type"], e.get("alert", ""), e.get("subject", ""), e.get("message", ""))
            for e in answer.json()["events"]
        ]
    return found


def containers() -> list[dict]:
    ids = []
    for project in PROJECTS:
        out = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        ids += out.split()
    if not ids:
        return []
    out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def bad_log_lines(cid: str) -> list[str]:
    logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True)
    lines = (logs.stdout + logs.stderr).splitlines()
    found = []
    for at, line in enumerate(lines):
        if not BAD_LINE.search(line):
            continue
        if line.startswith("Traceback"):
            # the whole traceback, through its exception line, so a failure says what broke
            end = at + 1
            while end < len(lines) and lines[end].startswith((" ", "\t")):
                end += 1
            line = "\n".join(lines[at : end + 1])
        found.append(line)
    return found


def violations(kit) -> dict[str, object]:
    """Everything a user would see go wrong, keyed by what it is; empty = healthy."""
    found: dict[str, object] = {}
    if fired := alerts(kit):
        found["alerts"] = fired
    if Hook.received:
        found["delivered"] = list(Hook.received)
    for c in containers():
        name, state = c["Name"].lstrip("/"), c["State"]
        service = c["Config"]["Labels"].get("com.docker.compose.service", "")
        if c.get("RestartCount"):
            found[f"{name} restarts"] = c["RestartCount"]
        if service.endswith("-init") or service == "volumes-init":
            if state["Status"] != "exited" or state["ExitCode"] != 0:
                found[f"{name} state"] = (state["Status"], state["ExitCode"])
        elif state["Status"] != "running":
            found[f"{name} state"] = (state["Status"], state["ExitCode"])
        if lines := bad_log_lines(c["Id"]):
            found[f"{name} log"] = lines[:5]
    triage = kit.run("triage", "--json", timeout=300)
    report = json.loads(triage.stdout or "{}")
    if triage.returncode != 0 or report.get("findings"):
        found["triage"] = report.get("findings") or triage.stdout + triage.stderr
    for row in kit.status():
        if row["service"].endswith("-init"):
            continue
        if (row["state"], row["health"]) not in (("running", "healthy"), ("running", "-")):
            found[f"status {row['service']}"] = (row["state"], row["health"])
    return found


def test_an_idle_kit_stays_healthy_past_its_timers(watched_kit):
    # past the first probe rounds, a lease and a retention tick, as a user's first minute
    time.sleep(IDLE_S)
    assert violations(watched_kit) == {}


PLAN_PROPOSAL = {
    "name": "grown",
    "tasks": [{"id": "grown", "type": "noop", "payload": {"echo": "added by the plan task"}}],
}


def every_executor_plan() -> str:
    """One task of each type the workers run (airig/executors)."""
    return """
name: every executor
tasks:
  - {id: transcribe, type: transcribe, model: Systran/faster-whisper-tiny,
     payload: {audio: inputs/watch.wav}}
  - {id: summarise, type: llm, model: qwen2.5:0.5b, depends_on: [transcribe],
     payload: {prompt: "Summarise: {{ tasks.transcribe.output }}"}}
  - {id: embed, type: embed, model: nomic-embed-text, depends_on: [summarise],
     payload: {input: "{{ tasks.summarise.output }}"}}
  - {id: picture, type: image,
     payload: {prompt: a lighthouse, checkpoint: watch.safetensors, steps: 2}}
  - {id: size, type: shell, payload: {command: "wc -c inputs/watch.wav"}}
  - {id: wait, type: noop, payload: {sleep_s: 1, echo: ok}}
  - {id: grow, type: plan, model: qwen2.5:0.5b,
     payload: {goal: "add one noop task that echoes a line"}}
  - {id: unload, type: resource, depends_on: [embed, grow],
     payload: {action: unload, service: ollama, model: qwen2.5:0.5b}}
"""


def service_container(service: str) -> str:
    for c in containers():
        if c["Config"]["Labels"].get("com.docker.compose.service") == service:
            return c["Id"]
    raise AssertionError(f"no {service} container")


def put_inputs(kit, tmp_path: Path) -> None:
    import wave

    path = tmp_path / "watch.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"\x00\x01" * 16000)
    r = requests.put(
        "http://127.0.0.1:8090/files/inputs/watch.wav", data=path.read_bytes(),
        headers=auth(kit), timeout=30,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    # A checkpoint dropped into ComfyUI's models folder, as a user copies one in.
    comfy = service_container("comfyui-cpu")
    put = "mkdir -p /root/ComfyUI/models/checkpoints && head -c 4096 /dev/urandom > /root/ComfyUI/models/checkpoints/watch.safetensors"  # noqa: E501
    done = subprocess.run(["docker", "exec", comfy, "sh", "-c", put], capture_output=True)
    assert done.returncode == 0, done.stderr
    # The Ollama stand-in answers the plan task with this proposal (its script file).
    script = tmp_path / "script.json"
    script.write_text(json.dumps([json.dumps(PLAN_PROPOSAL)]))
    ollama = service_container("ollama-cpu")
    done = subprocess.run(
        ["docker", "cp", str(script), f"{ollama}:/tmp/airig-standin-script.json"],
        capture_output=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def wait_plan(kit, plan_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        plan = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(kit), timeout=10).json()
        if plan["status"] != "running":
            return plan
        time.sleep(1)
    raise AssertionError(f"plan {plan_id} still running after {timeout}s")


def test_a_plan_through_every_executor_leaves_the_kit_healthy(watched_kit, tmp_path):
    put_inputs(watched_kit, tmp_path)
    r = requests.post(
        f"{BRAIN}/v1/plans", data=every_executor_plan(), timeout=10,
        headers={**auth(watched_kit), "Content-Type": "application/yaml"},
    )  # fmt: skip
    assert r.status_code in (200, 201), r.text
    plan = wait_plan(watched_kit, r.json()["id"])
    states = {t["id"]: (t["state"], t.get("error")) for t in plan["tasks"]}
    assert {s for s, _ in states.values()} == {"SUCCEEDED"}, states
    types = {t["type"] for t in plan["tasks"]}
    assert types >= {"transcribe", "llm", "embed", "image", "shell", "noop", "plan", "resource"}
    assert any(t["id"].startswith("grow__") for t in plan["tasks"]), states
    # the timers again, after the work: a probe round past the last unload
    time.sleep((DOWN_AFTER + 2) * PROBE_INTERVAL_S)
    assert violations(watched_kit) == {}


def fetch(kit, rel: str) -> requests.Response:
    return requests.get(f"http://127.0.0.1:8090/files/{rel}", headers=auth(kit), timeout=30)


def run_recipe(kit, recipe: str, folder: Path) -> tuple[dict, str]:
    """`submit recipes/<recipe>.yaml --inputs-dir folder --watch` as a user types it: the
    finished plan and what the CLI printed."""
    done = kit.run("submit", f"recipes/{recipe}.yaml", "--inputs-dir", str(folder), "--watch",
                   timeout=600)  # fmt: skip
    said = done.stdout + done.stderr
    found = re.search(r"plan (\w+) submitted", said)
    assert found, said
    plan = requests.get(f"{BRAIN}/v1/plans/{found[1]}", headers=auth(kit), timeout=10).json()
    return plan, said


def item_states(plan: dict, group: str) -> dict[str, tuple[str, str | None]]:
    fanout = next(f for f in plan["fanouts"] if f["id"] == group)
    return {i["label"]: (i["state"], i.get("error")) for i in fanout["items"]}


def search(kit, query: str, recipe: str) -> list[dict]:
    done = kit.run("search", query, "--recipe", recipe, "--json", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["results"]


def test_the_recipes_run_on_folders_of_generated_media(watched_kit, tmp_path):
    """The seed's workloads (issue 25): the three recipes on generated media, each with one
    corrupt input that fails alone; notes, text, a CSV and two searchable indexes; then the
    two ZIM recipes on a generated archive (issue 39)."""
    from support_media import make_pdf, make_video, run

    talks, scans, photos = (tmp_path / n for n in ("talks", "scans", "photos"))
    for folder in (talks, scans, photos):
        folder.mkdir()
    make_video(talks / "volcanoes-of-iceland.mp4")
    make_video(talks / "sourdough-bread-basics.mp4", size="256x192")
    (talks / "truncated.mp4").write_bytes((talks / "volcanoes-of-iceland.mp4").read_bytes()[:2000])
    make_pdf(scans / "harbour-report.pdf", [["Harbour report", "Ferries and cranes"],
                                            ["Second page", "Lighthouse keepers"]])  # fmt: skip
    make_pdf(scans / "orchard-ledger.pdf", [["Orchard ledger", "Apples and pears"]])
    (scans / "garbage.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    for name, source in (("bars", "smptebars"), ("pattern", "testsrc")):
        run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i",
             f"{source}=size=320x240", "-frames:v", "1", str(photos / f"{name}.jpg")])  # fmt: skip
    (photos / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")

    # video-notes: two notes, the truncated video fails alone, the plan ends partial
    plan, said = run_recipe(watched_kit, "video-notes", talks)
    assert "3 uploaded" in said, said
    assert plan["status"] == "partial", said
    items = item_states(plan, "videos")
    assert items["volcanoes-of-iceland.mp4"][0] == "succeeded", items
    assert items["sourdough-bread-basics.mp4"][0] == "succeeded", items
    state, error = items["truncated.mp4"]
    assert state == "failed" and error and "\n" not in error, items
    note = fetch(watched_kit, "outputs/video-notes/talks/volcanoes-of-iceland.md")
    assert note.status_code == 200, note.text
    assert "# volcanoes-of-iceland" in note.text and "](" in note.text, note.text
    frames = fetch(watched_kit, "outputs/video-notes/talks/volcanoes-of-iceland").json()
    assert len([e for e in frames["entries"] if e[0].endswith(".png")]) >= 2, frames
    hits = search(watched_kit, "volcanoes of iceland", "video-notes")
    assert hits[0]["source"].endswith("volcanoes-of-iceland.mp4"), hits

    # A second submit of the same folder sends nothing (checked by hash).
    plan, said = run_recipe(watched_kit, "video-notes", talks)
    assert "0 uploaded" in said and "3 already there" in said, said

    # pdf-text: page-numbered text; the garbage PDF fails alone; a page is found by search
    plan, said = run_recipe(watched_kit, "pdf-text", scans)
    assert plan["status"] == "partial", said
    items = item_states(plan, "pdfs")
    assert items["garbage.pdf"][0] == "failed" and items["harbour-report.pdf"][0] == "succeeded"
    text = fetch(watched_kit, "outputs/pdf-text/scans/harbour-report.txt").text
    assert "--- page 2 ---" in text and "Lighthouse" in text.split("--- page 2 ---")[1], text
    hits = search(watched_kit, "lighthouse keepers", "pdf-text")
    assert hits[0]["source"].endswith("harbour-report.pdf"), hits
    assert hits[0]["locator"] == "page 2", hits
    # the CPU workers read the pages with tesseract and loaded no vision model for it
    # (issue 35: `model.load pdfs__1__ocr qwen2.5vl:7b cpu-2` before tesseract ran)
    loads = requests.get(
        f"{BRAIN}/v1/events", params={"type": "model.load", "limit": 500},
        headers=auth(watched_kit), timeout=10,
    ).json()["events"]  # fmt: skip
    ocr_loads = [e for e in loads if e.get("plan") == plan["id"] and "ocr" in e["task_id"]]
    assert ocr_loads == [], ocr_loads

    # photos-captions: one CSV row per photo, the broken one with its error
    plan, said = run_recipe(watched_kit, "photos-captions", photos)
    assert plan["status"] == "partial", said
    # UTF-8 with a byte-order mark, so a spreadsheet reads the accents right
    sheet = fetch(watched_kit, "outputs/photos-captions/photos/captions.csv").content
    assert sheet.startswith(b"\xef\xbb\xbf"), sheet[:40]
    rows = list(csv.DictReader(io.StringIO(sheet.decode("utf-8-sig"))))
    assert list(rows[0]) == ["file", "caption", "tags", "error"], rows  # README's header
    by_name = {row["file"]: row for row in rows}
    assert set(by_name) == {"bars.jpg", "pattern.jpg", "broken.jpg"}, rows
    assert by_name["bars.jpg"]["caption"] and not by_name["bars.jpg"]["error"], rows
    assert by_name["broken.jpg"]["error"], rows

    # zim-articles and zim-videos (issue 39 §1): a Kiwix-style archive made with libzim's
    # own writer, three articles, a redirect and two talks; the brain extracts the entries
    # on the data volume, the workers turn them into text, notes and two indexes
    from support_zim import ARTICLES, make_zim, video_entries

    zims = tmp_path / "zims"
    make_zim(zims / "library.zim", [*ARTICLES, *video_entries(tmp_path)],
             redirects=[("Ice", "Ice", "Glacier")])  # fmt: skip
    plan, said = run_recipe(watched_kit, "zim-articles", zims)
    assert plan["status"] == "succeeded", said
    text = fetch(watched_kit, "outputs/zim-articles/zims/Water_purification.txt").text
    assert text.startswith("Water purification\n") and "chlorine tablets" in text, text
    assert "script words" not in text, text  # the page's script is no text
    hits = search(watched_kit, "boiling water kills pathogens chlorine", "zim-articles")
    assert hits[0]["source"] == (
        "Water purification (inputs/zims/library.zim/Water_purification)"
    ), hits
    plan, said = run_recipe(watched_kit, "zim-videos", zims)
    assert plan["status"] == "succeeded", said
    note = fetch(watched_kit, "outputs/zim-videos/zims/videos_talk1.md").text
    assert note.startswith("# How glaciers move\n") and "Stand-in transcript" in note, note

    # the whole kit, as after every other plan
    time.sleep((DOWN_AFTER + 2) * PROBE_INTERVAL_S)
    assert violations(watched_kit) == {}


# What the backup test hands the restore test: the archive, the plan it caught mid-way,
# and a token made before it (a restored kit still takes it).
BACKUP: dict[str, object] = {}


def test_a_backup_taken_mid_plan_is_private_and_verifies(watched_kit, tmp_path_factory):
    token = requests.post(
        f"{BRAIN}/v1/tokens", json={"scope": "submit", "name": "before-backup"},
        headers=auth(watched_kit), timeout=10,
    ).json()["token"]  # fmt: skip
    plan = {"name": "backed-up", "tasks": [
        {"id": "slow", "type": "shell", "task_class": "cpu",
         "payload": {"command": "sleep 15 && echo slept"}},
        {"id": "after", "type": "noop", "depends_on": ["slow"]},
    ]}  # fmt: skip
    answer = requests.post(f"{BRAIN}/v1/plans", json=plan, headers=auth(watched_kit), timeout=30)
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(watched_kit), timeout=10)
        states = {t["id"]: t["state"] for t in view.json()["tasks"]}
        if states["slow"] == "RUNNING":
            break
        time.sleep(0.5)
    assert states == {"slow": "RUNNING", "after": "PENDING"}, states

    folder = tmp_path_factory.mktemp("backups")
    started = time.monotonic()
    done = watched_kit.run("backup", "--to", str(folder), "--keep", "3", "--inputs", timeout=300)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "holds .env with the kit's secrets" in done.stdout
    # what the user made is in it, and the summary says so (issue 35 §1)
    said = " ".join(done.stdout.split())  # rich wraps the long line at COLUMNS
    held = said.split("In it: ", 1)[1].split(" Not in it: ", 1)[0]
    for part in ("store", "results", "outputs", "search index", "inputs"):
        assert f"{part} " in held, said
    assert "Not in it: models" in said, said
    [archive] = folder.glob("airig-backup-*.tar.gz")
    assert archive.stat().st_mode & 0o777 == 0o600
    checked = watched_kit.run("backup", "--verify", str(archive))
    assert checked.returncode == 0 and "every sha256 matches" in checked.stdout, checked.stdout
    assert "Last backup:" in watched_kit.run("status").stdout
    recorded = requests.get(f"{BRAIN}/v1/backups", headers=auth(watched_kit), timeout=10).json()
    assert [b["archive"] for b in recorded["backups"]] == [archive.name]
    # it was taken mid-plan: the plan still runs here
    view = requests.get(f"{BRAIN}/v1/plans/{plan_id}", headers=auth(watched_kit), timeout=10)
    assert view.json()["status"] == "running"
    BACKUP.update(archive=archive, plan=plan_id, token=token)
    print(f"\nbackup --inputs: {archive.stat().st_size} bytes in {took:.1f} s: {held}")


def test_down_stops_every_container_gracefully_and_leaves_nothing(watched_kit):
    from conftest import airig_leftovers

    events = subprocess.Popen(
        ["docker", "events", "--filter", "type=container", "--filter", "event=die",
         "--format", "{{json .}}"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        done = watched_kit.run("down")
        assert done.returncode == 0, done.stdout + done.stderr
        time.sleep(2)  # the last die events reach the stream
    finally:
        events.terminate()
        out, _ = events.communicate(timeout=30)
    died = [json.loads(line) for line in out.splitlines() if line.strip()]
    labels = "com.docker.compose.project"
    kit_died = [e for e in died if e["Actor"]["Attributes"].get(labels) in PROJECTS]
    assert kit_died, "down stopped no container"
    killed = {
        e["Actor"]["Attributes"]["name"]: e["Actor"]["Attributes"].get("exitCode")
        for e in kit_died
        if e["Actor"]["Attributes"].get("exitCode") == "137"
    }
    assert killed == {}, "SIGKILLed at the end of the grace period"
    # Workers stop before the brain: once worker_down fired here for every deregistered
    # worker in the seconds the brain outlived them (store/workers.RETIRED)
    assert Hook.received == [], "the kit alerted while it went down"
    left = airig_leftovers()
    assert (left["containers"], left["networks"]) == ([], [])
    root = watched_kit.root
    generated = root / ".airig"  # rglob of a missing folder yields nothing
    leftovers = [str(p.relative_to(root)) for p in generated.rglob("*")]
    # what `down` keeps on purpose is the user's own history (tune's log, the image lock
    # and its update log: the next `up` starts the images that ran), nothing generated
    kept = ("tuning.log", "images.lock", "update.log")
    assert [p for p in leftovers if not p.endswith(kept)] == []
    links = [str(p) for p in root.glob("0*/.env") if p.is_symlink() or p.exists()]
    assert links == []


def test_the_backup_restores_on_a_fresh_kit_and_its_plan_finishes_there(
    watched_kit, tmp_path_factory
):
    """The disk died (`down --volumes`): a fresh clone restores the archive taken mid-plan,
    and that plan finishes on it; the restored kit is as healthy as the first."""
    from conftest import Kit, copy_kit

    archive, plan_id = BACKUP["archive"], BACKUP["plan"]
    assert isinstance(archive, Path)
    fresh = Kit(copy_kit(tmp_path_factory.mktemp("restored") / "airig"))
    # a cut-off archive: one line, nothing written
    cut = archive.with_name("cut-" + archive.name)
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    refused = fresh.run("restore", str(cut))
    assert refused.returncode != 0 and "truncated" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
    assert not (fresh.root / ".env").exists()

    gone = watched_kit.run("down", "--volumes", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    # the first kit is gone (its `down` sent nothing: the test above): from here on, a
    # notice can only come from the restored kit
    assert Hook.received == [], "the first kit alerted while it went down"
    try:
        done = fresh.run("restore", str(archive), timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (fresh.root / ".env").read_bytes() == (watched_kit.root / ".env").read_bytes()
        assert not (fresh.root / ".airig" / "restore.json").exists()
        said = " ".join(done.stdout.split())
        assert "In it: store" in said and " outputs " in said, said
        plan = wait_plan(fresh, str(plan_id), timeout=240)
        assert plan["status"] == "succeeded", plan
        # a token made before the backup still authenticates
        token = {"Authorization": f"Bearer {BACKUP['token']}"}
        assert requests.get(f"{BRAIN}/v1/plans", headers=token, timeout=10).status_code == 200
        # what the recipes made came back: notes with their keyframes, text, the CSV,
        # the uploaded inputs (backup --inputs), and the search index answers as before
        note = fetch(fresh, "outputs/video-notes/talks/volcanoes-of-iceland.md")
        assert note.status_code == 200 and "# volcanoes-of-iceland" in note.text, note.text
        frames = fetch(fresh, "outputs/video-notes/talks/volcanoes-of-iceland").json()
        assert len([e for e in frames["entries"] if e[0].endswith(".png")]) >= 2, frames
        text = fetch(fresh, "outputs/pdf-text/scans/harbour-report.txt")
        assert text.status_code == 200 and "Lighthouse" in text.text, text.text
        sheet = fetch(fresh, "outputs/photos-captions/photos/captions.csv")
        assert sheet.status_code == 200 and sheet.content.startswith(b"\xef\xbb\xbf")
        video = fetch(fresh, "inputs/talks/volcanoes-of-iceland.mp4")
        assert video.status_code == 200 and len(video.content) > 1000, video.status_code
        hits = search(fresh, "volcanoes of iceland", "video-notes")
        assert hits and hits[0]["source"].endswith("volcanoes-of-iceland.mp4"), hits
        hits = search(fresh, "lighthouse keepers", "pdf-text")
        assert hits and hits[0]["locator"] == "page 2", hits
        # over a running kit: one line, nothing touched
        again = fresh.run("restore", str(archive), "--yes")
        assert again.returncode != 0 and "the kit is running" in again.stdout + again.stderr
        found = violations(fresh)
        if found:  # what the brain knows of the workers says which one did not come back
            found["workers"] = requests.get(f"{BRAIN}/v1/workers", headers=auth(fresh),
                                            timeout=10).json()  # fmt: skip
            found["brain log"] = subprocess.run(
                ["docker", "logs", "airig-agents-brain-1"], capture_output=True, text=True
            ).stdout.splitlines()[-40:]  # fmt: skip
        assert found == {}
    finally:
        fresh.run("down", "--volumes", "--yes")
