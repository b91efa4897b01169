"""recipes/pdf-text.yaml runs page by page (issue 39 §2): the recipe as `submit` fills it,
stored by a real brain, its tasks claimed by two workers in turn and run by the real
executors (pdftoppm, OCR, the text writer) up to the index task, which needs Ollama:
each page is an ocr task of its own, the brain expands them
when the list of pages is known, and every PDF gets its text file."""

from __future__ import annotations

from pathlib import Path

import brain_helpers as h
from support import exec_context
from support_media import make_pdf

from airig.brain.plans.load import load_plan
from airig.brain.plans.submit import insert_plan
from airig.brain.plans.validate import Limits
from airig.executors.base import run_task, validate_payload
from airig.executors.context import TaskError
from airig.launcher import plan_inputs

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "pdf-text.yaml"
CLASSES = ("cpu", "llm", "script")


def _submitted(data: Path, brain) -> str:
    body = plan_inputs.fill(RECIPE.read_bytes(), "inputs/scans", "outputs/pdf-text/scans")
    # the default .env: no vision model (optional, so ""), an embedding model
    body = plan_inputs.MODEL.sub(
        lambda m: "" if m.group(2) else f"{m.group(1)}-model", body.decode()
    ).encode()
    plan, tainted, _ = load_plan(body, "application/yaml", Limits(), data)
    return brain.write(
        lambda conn, outbox, _: insert_plan(
            conn, outbox, plan, tainted, 1000.0, submitted_by="test", digest="d",
            idempotency_key=None, default_timeout_s=600.0,
        )
    )  # fmt: skip


def test_pdf_text_reads_each_page_as_its_own_task_and_writes_a_file_per_pdf(tmp_path):
    data = tmp_path / "data"
    (data / "inputs" / "scans").mkdir(parents=True)
    make_pdf(data / "inputs" / "scans" / "a.pdf", [["Invoice 4711"], ["Paid in full"]])
    make_pdf(data / "inputs" / "scans" / "b.pdf", [["Brown fox"]])
    brain = h.make_brain(tmp_path / "brain", BRAIN_DATA_DIR=str(data))
    plan_id = _submitted(data, brain)
    ran: list[tuple[str, str, str]] = []  # (key, type, worker)
    indexed: list[dict] = []
    now = 1001.0
    for turn in range(40):
        worker = ("w1", "w2")[turn % 2]
        got = h.claim(brain, now, worker=worker, classes=CLASSES)
        if got is None:
            break
        task, payload = got
        ran.append((task["key"], task["type"], worker))
        h.do(brain, plan_id, task["key"], "start", now, worker=worker)
        if task["type"] == "embed":  # needs Ollama: the run stops here, its input read
            embed = validate_payload("embed", payload)  # what the embed executor reads
            indexed = [d.model_dump(exclude_none=True) for d in embed.documents or []]
            break
        ctx = exec_context(tmp_path, timeout_s=300)
        try:
            output = run_task(task["type"], payload, ctx).output
        except TaskError as exc:  # pragma: no cover - shows what failed
            raise AssertionError(f"{task['key']}: {exc.message}") from exc
        h.do(brain, plan_id, task["key"], "complete", now, worker=worker, output=output)
        now += 1
    states = h.state_of(brain, plan_id)
    assert states.pop("index") == "RUNNING"
    assert all(state == "SUCCEEDED" for state in states.values()), states
    reads = [(key, worker) for key, kind, worker in ran if kind == "ocr"]
    # three pages, three ocr tasks, on both workers: the pages ran apart, not a PDF a task
    assert sorted(key for key, _ in reads) == ["ocr__0__read", "ocr__1__read", "ocr__2__read"]
    assert {worker for _, worker in reads} == {"w1", "w2"}
    a = (data / "outputs/pdf-text/scans/a.txt").read_text()
    assert "--- page 1 ---" in a and "4711" in a and "--- page 2 ---" in a
    assert "fox" in (data / "outputs/pdf-text/scans/b.txt").read_text().lower()
    [embed] = [key for key, kind, _ in ran if kind == "embed"]
    assert embed == "index" and ran[-1][0] == "index"
    # the index gets each page read, with its PDF and page as the search hit's source
    assert sorted((d["source"], d["locator"]) for d in indexed) == [
        ("inputs/scans/a.pdf", "page 1"), ("inputs/scans/a.pdf", "page 2"),
        ("inputs/scans/b.pdf", "page 1"),
    ]  # fmt: skip
    brain.db.close()
