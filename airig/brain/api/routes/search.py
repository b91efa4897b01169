"""Search what `embed` tasks indexed (``airig/brain/store/vectors.py``): ``POST /v1/search``
embeds the query with the index's own model through the Ollama at ``BRAIN_OLLAMA_URL``
and answers the nearest entries; ``GET /v1/search/indexes`` lists the indexes.

A submit token sees the indexes its own plans created and, in any index, the entries of
its own plans only; the admin sees every index and entry. An index file that cannot be
read (garbage on the data volume, a link, a full or read-only volume) is a 503 whose
detail starts ``index_unavailable:`` and ends with the fix, never a 500."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import ollama
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from airig.brain.api.auth import Principal, owner_of
from airig.brain.api.deps import BrainDep, SubmitterDep
from airig.brain.store import vectors
from airig.common.protocol import ErrorBody
from airig.common.task_schemas import INDEX_NAME_PATTERN

router = APIRouter(prefix="/v1", tags=["search"])
Responses = dict[int | str, dict[str, Any]]

QUERY_TIMEOUT_S = 60.0
HOW_TO_BUILD = (
    "no search index yet: run a plan with an embed task that names one "
    "(payload: index, documents; PLANS.md, 'Task fields')"
)

_SEARCH_REFUSALS: Responses = {
    404: {"model": ErrorBody, "description": "no such index, or no index yet"},
    422: {"description": "a bad query, k out of 1..100, another model than the index's, "
          "or several indexes and none named",
          "content": {"application/json": {"schema": {"anyOf": [
              {"$ref": "#/components/schemas/ErrorBody"},
              {"$ref": "#/components/schemas/HTTPValidationError"},
          ]}}}},
    502: {"model": ErrorBody, "description": "Ollama refused to embed the query, or answered "
          "a vector with no direction"},
    503: {"model": ErrorBody, "description": "Ollama cannot be reached, or the index file "
          "cannot be read (index_unavailable, with the fix)"},
}  # fmt: skip
_INDEX_UNAVAILABLE: Responses = {
    503: {
        "model": ErrorBody,
        "description": "the index file cannot be read (index_unavailable, with the fix)",
    }
}


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    index: Annotated[str, StringConstraints(pattern=INDEX_NAME_PATTERN)] | None = None
    k: Annotated[int, Field(ge=1, le=100)] = 10
    # The model the caller expects; another than the index's is refused (422).
    model: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class SearchHit(BaseModel):
    score: float  # 1 - cosine distance: 1 is the same direction
    distance: float
    source: str | None
    locator: str | None  # a timestamp, a page: as the embed task's document gave it
    snippet: str
    plan_id: str
    task: str
    untrusted: bool  # embedded by an untrusted rig, or from tainted input


class SearchAnswer(BaseModel):
    index: str
    model: str
    results: list[SearchHit]


class IndexView(BaseModel):
    name: str
    model: str
    dims: int
    entries: int


class IndexesView(BaseModel):
    indexes: list[IndexView]


def embed_query(url: str, model: str, text: str) -> list[float]:
    """The query's vector from Ollama (the ``ollama`` client, as the executors use)."""
    client = ollama.Client(host=url, timeout=QUERY_TIMEOUT_S)
    try:
        return list(client.embed(model=model, input=text).embeddings[0])
    finally:
        client.close()


def _unavailable(exc: vectors.IndexUnavailable) -> HTTPException:
    return HTTPException(503, f"index_unavailable: {exc}")


def _scope(who: Principal) -> tuple[str | None, bool]:
    """Whose entries a token sees: (owner, admin); admin sees every one."""
    admin = who.scope == "admin"
    return (None if admin else owner_of(who)), admin


def _indexes(brain: Any, who: Principal) -> list[vectors.IndexInfo]:
    owner, admin = _scope(who)
    try:
        return vectors.indexes(vectors.index_path(brain.settings.data_dir), owner, admin)
    except vectors.IndexUnavailable as exc:
        raise _unavailable(exc) from None


@router.get("/search/indexes", response_model=IndexesView, responses=_INDEX_UNAVAILABLE)
def list_indexes(brain: BrainDep, who: SubmitterDep) -> IndexesView:
    """Every search index (a submit token: those its plans created, with its own
    entries): its embedding model, dimensions and entries."""
    return IndexesView(indexes=[IndexView(**vars(info)) for info in _indexes(brain, who)])


@router.post("/search", response_model=SearchAnswer, responses=_SEARCH_REFUSALS)
def search(body: SearchRequest, brain: BrainDep, who: SubmitterDep) -> SearchAnswer:
    """The ``k`` entries of an index nearest the query, nearest first (a submit token:
    of its own plans' entries)."""
    known = _indexes(brain, who)
    if not known:
        raise HTTPException(404, HOW_TO_BUILD)
    names = ", ".join(info.name for info in known)
    if body.index is not None:
        chosen = next((info for info in known if info.name == body.index), None)
        if chosen is None:
            raise HTTPException(404, f"no index {body.index!r} (known: {names})")
    elif len({vectors.normalise_model(info.model) for info in known}) == 1:
        chosen = known[0] if len(known) == 1 else None
    else:
        raise HTTPException(
            422, f"the indexes use different models: name one (index: one of {names})"
        )
    targets = [chosen] if chosen is not None else known
    model = targets[0].model
    if body.model is not None and not vectors.same_model(model, body.model):
        where = f"index {chosen.name!r} was" if chosen is not None else "the indexes were"
        raise HTTPException(
            422,
            f"{where} built with {model!r}, not {body.model!r}: search with {model!r} "
            "(leave model out)",
        )
    url = brain.settings.review_ollama_url
    try:
        vector = embed_query(url, model, body.query)
    except ollama.ResponseError as exc:
        raise HTTPException(
            502, f"Ollama could not embed the query with {model!r}: {str(exc.error)[:300]}"
        ) from None
    except (ConnectionError, httpx.HTTPError, OSError) as exc:
        raise HTTPException(
            503, f"Ollama at {url} is unreachable ({exc.__class__.__name__}): check the "
            "ollama service",
        ) from None  # fmt: skip
    if vectors.direction(vector) is None:  # no distance to it would mean anything
        raise HTTPException(
            502, f"{model!r} answered a vector with no direction (all zero, or not finite) "
            "for the query: try other words, or check the model with `models verify`",
        )  # fmt: skip
    path = vectors.index_path(brain.settings.data_dir)
    owner, admin = _scope(who)
    hits: list[dict[str, Any]] = []
    try:
        for target in targets:
            if len(vector) != target.dims:
                raise HTTPException(
                    422,
                    f"{model!r} answered {len(vector)} dimensions; index {target.name!r} "
                    f"holds {target.dims}: rebuild the index, or search another",
                )
            hits += vectors.nearest(path, target.name, vector, body.k, owner, admin)
    except vectors.IndexUnavailable as exc:
        raise _unavailable(exc) from None
    hits.sort(key=lambda hit: hit["distance"])
    index = ",".join(target.name for target in targets)
    return SearchAnswer(index=index, model=model, results=[SearchHit(**h) for h in hits[: body.k]])
