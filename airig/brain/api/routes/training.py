"""``GET /v1/training/samples``: the training export (issue 40 §4), a page at a time.

`training export` on the host asks this route rather than reading the data volume: the
log says nothing of trust, which only the store knows (``store/training.py``), the log
lies in a volume the host reaches only through a container, and every other command
reads the brain's data over this API with the admin token. So the exclusions (failed,
sensitive, untrusted input or rig, a task the store lost, incomplete, below
``min_quality``, unreadable lines) and the second redaction happen here; the CLI drops
duplicates across pages and writes the file. Admin only: the samples are the kit's
prompts and answers.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from airig.brain.api.deps import AdminDep, BrainDep
from airig.brain.store import training

TypeName = Literal[training.TYPES]  # type: ignore[valid-type]
Quality = Literal[training.QUALITIES]  # type: ignore[valid-type]


class SamplesPage(BaseModel):
    # {"messages": [{"role", "content"}...], "plan", "task", "model", "timestamp"}
    samples: list[dict[str, Any]]
    excluded: dict[str, int]  # reason (store/training.py REASONS) -> lines left out
    next: str | None  # the cursor of the next page; null: the log's end


router = APIRouter(prefix="/v1", tags=["training"])


@router.get("/training/samples", response_model=SamplesPage)
def training_samples(
    brain: BrainDep,
    _: AdminDep,
    cursor: Annotated[str | None, Query(pattern=training.CURSOR.pattern, max_length=60)] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    type: Annotated[TypeName, Query()] = "llm",  # noqa: A002 - the CLI's word
    min_quality: Annotated[Quality, Query()] = "any",
    limit: Annotated[int, Query(ge=1, le=training.MAX_PAGE_LINES)] = training.MAX_PAGE_LINES,
) -> SamplesPage:
    """The samples of the next ``limit`` log lines (about 4 MB at most) after ``cursor``
    (none: the oldest), each a chat in the OpenAI fine-tuning format, with the count of
    lines left out per reason; ``next`` is the cursor to ask with next."""
    query = training.Query(since, type, min_quality, cursor, limit)
    try:
        with brain.db.read() as conn:
            page = training.read_page(conn, brain.settings, query, brain.events.known_secrets)
    except training.BadCursor as exc:
        raise HTTPException(422, str(exc)) from None
    except training.LogBusy as exc:  # a rotation under each of its reads: rare, retryable
        raise HTTPException(503, str(exc)) from None
    return SamplesPage(samples=page.samples, excluded=dict(page.excluded), next=page.next)
