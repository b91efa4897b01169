"""Plan and task definitions as submitted (after parsing, before validation)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from airig.common import task_types
from airig.common.protocol import TASK_CLASSES

TASK_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# Published as enums in the OpenAPI schema, so a client generated from it sends only what
# the brain runs; checked by ``validate.py`` (not by pydantic here), whose refusal names
# every known type, for JSON, YAML and Markdown plans alike.
TASK_TYPES = tuple(sorted(task_types.TASK_TYPES))


class TaskSpec(BaseModel):
    """One task of a plan. Unknown fields are errors (a typo must not be ignored)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID_PATTERN)
    name: str = Field("", max_length=200)
    type: str = Field(min_length=1, max_length=32, json_schema_extra={"enum": list(TASK_TYPES)})
    task_class: (
        Annotated[str, Field(max_length=32, json_schema_extra={"enum": list(TASK_CLASSES)})] | None
    ) = None
    payload: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    priority: int = Field(5, ge=1, le=10)
    retry_count: int = Field(3, ge=0, le=20)
    timeout_s: float | None = Field(None, gt=0, le=7 * 86400)
    model: str | None = Field(None, min_length=1, max_length=200)
    trust: Literal["trusted", "untrusted"] = "trusted"
    sensitive: bool = False
    # The external tier (airig/brain/escalation/): when the brain may hand the task over,
    # and whether a sensitive task's data may leave the machine at all.
    escalate: Literal["never", "on_failure", "always"] = "never"
    allow_external: bool = False


def _exactly_one_source(schema: dict[str, Any]) -> None:
    """Publish what ``plans/fanout.py`` enforces: one source, given (never null)."""
    properties = schema.get("properties", {})
    for name in ("glob", "from", "zim", "mimetype", "path"):
        kind = "string"
        properties[name] = {**properties.get(name, {}), "type": kind}
        properties[name].pop("anyOf", None)
        properties[name].pop("default", None)
    properties["items"] = {**properties.get("items", {}), "type": "array", "minItems": 1}
    properties["items"].pop("anyOf", None)
    properties["items"].pop("default", None)
    schema["minProperties"], schema["maxProperties"] = 1, 3
    schema["oneOf"] = [{"required": [name]} for name in ("glob", "items", "from", "zim")]
    # the filters go with ``zim`` alone
    schema["dependentRequired"] = {"mimetype": ["zim"], "path": ["zim"]}


class ForEach(BaseModel):
    """A fan-out group's items: exactly one of the four sources, and a ``zim`` source's
    filters beside it (PLANS.md, "Fan-out")."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, json_schema_extra=_exactly_one_source
    )

    glob: str | None = Field(None, description="files on the data volume, relative")
    items: list[Any] | None = Field(None, description="text, numbers or mappings of fields")
    from_: str | None = Field(
        None,
        alias="from",
        description='a list in an upstream output: "{{ tasks.<id>.output.<field> }}"',
    )
    zim: str | None = Field(None, description="ZIM archives on the data volume (a glob)")
    mimetype: str | None = Field(None, description="zim: entries of this MIME type (video/*)")
    path: str | None = Field(None, description="zim: entries whose path matches (A/*)")


class GroupSpec(BaseModel):
    """A fan-out group: its template ``tasks`` repeated per item of ``for_each``, as the
    tasks ``<id>__<index>__<task id>``; checked by ``plans/fanout.py`` (published here)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=TASK_ID_PATTERN)
    name: str = Field("", max_length=200)
    for_each: ForEach
    output: str | None = Field(None, description="the template task whose output is the item's")
    depends_on: list[str] = Field(default_factory=list)
    tasks: list[TaskSpec] = Field(min_length=1)


class PlanRequest(BaseModel):
    """What ``POST /v1/plans`` accepts, as published in its OpenAPI schema (JSON; YAML and
    Markdown carry the same fields). ``validate_plan`` reads these fields and no others;
    the stored plan's ``fixes`` are the brain's (the task classes it inferred)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("plan", description="empty = 'plan'; cut to 200 characters")
    description: str = ""
    rerun: bool = Field(
        False, description="run every glob item, even one unchanged since an earlier plan"
    )
    tasks: list[TaskSpec | GroupSpec] = Field(min_length=1)


class PlanSpec(BaseModel):
    """A validated plan, ready to be stored."""

    name: str
    tasks: list[TaskSpec] = Field(min_length=1)
    fixes: list[dict[str, str]] = Field(default_factory=list)
    # fan-out item tasks (plans/fanout.py): key -> (group key, item index)
    members: dict[str, tuple[str, int]] = Field(default_factory=dict)
    # run every glob item, even one an earlier plan left unchanged (plans/reuse.py)
    rerun: bool = False
