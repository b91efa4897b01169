"""Payload schemas, one per task type (``task_types.py`` is the table of types).

The brain validates every submitted payload against these (per-field errors, nothing
half-enqueued) and the worker validates again before it runs one, because templating
(`{{ tasks.x.output }}`) fills some fields only at claim time. Only pydantic and the
standard library are imported here: the brain must not need the executors' HTTP clients.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from airig.common.spotlight import contains_reserved_delimiter

MAX_PROMPT_CHARS = 200_000
MAX_SHORT_CHARS = 10_000
MAX_MESSAGES = 500
MAX_EMBED_INPUTS = 2_048
MAX_WORKFLOW_NODES = 500

ModelName = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
ShortText = Annotated[str, StringConstraints(max_length=MAX_SHORT_CHARS)]
LongText = Annotated[str, StringConstraints(max_length=MAX_PROMPT_CHARS)]
Options = Annotated[dict[str, Any], Field(max_length=64)]


class Payload(BaseModel):
    """Base of every payload: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


NAME_MAX = 255
# A folder of the data volume as a JSON-schema pattern (for the OpenAPI schema; the
# checks stay ``relative_data_path`` and the look-up, with their own messages): not
# absolute, not ``~``, no backslash, no ``..`` name, no NUL (no file system path holds
# one), names of at most NAME_MAX characters (the check counts UTF-8 bytes, which a
# pattern cannot). Names are runs between slashes, so it never backtracks far.
_NAME = rf"[^/\\\x00]{{1,{NAME_MAX}}}"
DATA_PATH_PATTERN = rf"^(?![/~])(?!(?:[^/]*/)*\.\.(?![^/])){_NAME}(?:/+{_NAME})*/*$"


def relative_data_path(value: str) -> str:
    """Accept only a path inside the shared data volume (no absolute path, no `..`)."""
    path = PurePosixPath(value)
    if not value or path.is_absolute() or value.startswith("~") or "\\" in value:
        raise ValueError("must be a relative path inside the data volume")
    if ".." in path.parts:
        raise ValueError("must not contain '..'")
    # The file system's own limit on one name (NAME_MAX, bytes): past it every look-up is
    # an OSError, which must not become a 500 where the path is checked.
    if any(len(part.encode()) > NAME_MAX for part in path.parts):
        raise ValueError(f"has a name longer than {NAME_MAX} bytes")
    return value


DataPath = Annotated[
    str, StringConstraints(min_length=1, max_length=1024), AfterValidator(relative_data_path)
]


class Message(Payload):
    role: Literal["system", "user", "assistant", "tool"]
    content: LongText


MAX_IMAGES = 16
# Images on the data volume: a list of paths, or (what a template inserts) a string holding
# a JSON list of paths or of objects with a `path` (a frames / pages output), or one path.
ImageList = (
    Annotated[list[DataPath], Field(min_length=1, max_length=MAX_IMAGES)]
    | Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)]
)


class LlmPayload(Payload):
    """A generate (``prompt``) or chat (``messages``) call to Ollama; with ``images`` the
    model sees them (it must have Ollama's "vision" capability)."""

    model: ModelName
    prompt: LongText | None = None
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)] | None = None
    system: LongText | None = None
    options: Options | None = None
    format: Literal["json"] | dict[str, Any] | None = None
    untrusted_input: LongText | None = None
    images: ImageList | None = None
    # One call per image (same prompt), the answers listed per image and joined in `text`.
    per_image: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> LlmPayload:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' or 'messages'")
        if self.per_image and self.images is None:
            raise ValueError("'per_image' needs 'images'")
        total = sum(len(m.content) for m in self.messages or [])
        if total > MAX_PROMPT_CHARS:
            raise ValueError(f"messages hold {total} characters; the limit is {MAX_PROMPT_CHARS}")
        return self

    @field_validator("untrusted_input")
    @classmethod
    def _no_forged_delimiter(cls, value: str | None) -> str | None:
        if value is not None and contains_reserved_delimiter(value):
            raise ValueError("contains a reserved <untrusted_data> delimiter")
        return value


INDEX_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
IndexName = Annotated[str, StringConstraints(pattern=INDEX_NAME_PATTERN)]
Locator = Annotated[str, StringConstraints(max_length=200)] | int | float


class Document(Payload):
    """One text to embed into an index, with where it came from: ``source`` (a file on the
    data volume, a URL…) and ``locator`` (a timestamp, a page)."""

    text: LongText
    source: Annotated[str, StringConstraints(max_length=1024)] | None = None
    locator: Locator | None = None


def parse_documents(value: Any) -> Any:
    """``documents`` as a list, or as the JSON text of one (what a template such as
    ``{{ tasks.note.output.documents }}`` inserts), or of an object holding it under
    ``documents`` (``{{ tasks.note.output }}``)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{"):
            try:
                value = json.loads(text)
            except ValueError as exc:
                if "{{" in text:  # a template not yet filled (at submission) stays a string
                    return value
                raise ValueError(f"is a string but not the JSON of a list: {exc}") from None
    if isinstance(value, dict) and "documents" in value:
        value = value["documents"]
    return value


class EmbedPayload(Payload):
    """Ollama ``/api/embed``: one string or a batch; with ``index``, ``documents`` (texts
    with their source and locator) whose vectors the brain adds to that search index."""

    model: ModelName
    input: (
        LongText
        | Annotated[list[LongText], Field(min_length=1, max_length=MAX_EMBED_INPUTS)]
        | None
    ) = None
    truncate: bool | None = None
    dimensions: Annotated[int, Field(ge=1, le=65_536)] | None = None
    options: Options | None = None
    index: IndexName | None = None
    documents: (
        # empty: an upstream task found nothing to index (a silent video); nothing is sent
        Annotated[list[Document], Field(max_length=MAX_EMBED_INPUTS)]
        | Annotated[str, StringConstraints(pattern=r"\{\{")]
        | None
    ) = None

    @field_validator("documents", mode="before")
    @classmethod
    def _documents_json(cls, value: Any) -> Any:
        return parse_documents(value)

    @model_validator(mode="after")
    def _inputs(self) -> EmbedPayload:
        if self.documents is not None and self.index is None:
            raise ValueError("'documents' go into an index: give 'index' too")
        if self.index is not None:
            if self.input is not None:
                raise ValueError("with 'index', give the texts as 'documents', not 'input'")
            if self.documents is None:
                raise ValueError("with 'index', give 'documents' (text, source, locator)")
        elif self.input is None:
            raise ValueError("give 'input' (a string or a list), or 'index' and 'documents'")
        return self

    def texts(self) -> list[str]:
        """What goes to Ollama, in order."""
        if isinstance(self.documents, list):
            return [document.text for document in self.documents]
        if self.input is None or isinstance(self.documents, str):
            raise ValueError("the documents were not filled in")
        return [self.input] if isinstance(self.input, str) else list(self.input)


class TranscribePayload(Payload):
    """Whisper server (OpenAI-compatible) transcription of a file on the data volume."""

    audio: DataPath
    model: ModelName
    language: Annotated[str, StringConstraints(min_length=2, max_length=8)] | None = None
    response_format: Literal["json", "verbose_json", "text", "srt", "vtt"] = "json"
    prompt: ShortText | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None


class ImagePayload(Payload):
    """ComfyUI: a full API-format ``workflow`` or a simple ``prompt`` + ``checkpoint``."""

    workflow: Annotated[dict[str, dict[str, Any]], Field(min_length=1)] | None = None
    prompt: ShortText | None = None
    negative_prompt: ShortText = ""
    checkpoint: Annotated[str, StringConstraints(min_length=1, max_length=300)] | None = None
    width: Annotated[int, Field(ge=64, le=4096, multiple_of=8)] = 512
    height: Annotated[int, Field(ge=64, le=4096, multiple_of=8)] = 512
    steps: Annotated[int, Field(ge=1, le=200)] = 20
    cfg: Annotated[float, Field(ge=0.0, le=50.0)] = 7.0
    seed: Annotated[int, Field(ge=0, le=2**64 - 1)] | None = None
    sampler_name: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "euler"
    scheduler: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "normal"
    batch_size: Annotated[int, Field(ge=1, le=16)] = 1
    filename_prefix: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")] = "airig"

    @model_validator(mode="after")
    def _one_source(self) -> ImagePayload:
        if (self.workflow is None) == (self.prompt is None):
            raise ValueError("give exactly one of 'workflow' or 'prompt'")
        if self.prompt is not None and not self.checkpoint:
            raise ValueError("'prompt' needs 'checkpoint' (a file in ComfyUI's models/checkpoints)")
        if self.workflow is not None:
            _check_workflow(self.workflow)
        return self


def _check_workflow(workflow: dict[str, dict[str, Any]]) -> None:
    """An API-format graph: node id -> {class_type, inputs}. ComfyUI checks the rest."""
    if len(workflow) > MAX_WORKFLOW_NODES:
        raise ValueError(f"workflow has {len(workflow)} nodes; the limit is {MAX_WORKFLOW_NODES}")
    for node_id, node in workflow.items():
        if not isinstance(node.get("class_type"), str) or not isinstance(node.get("inputs"), dict):
            raise ValueError(
                f"workflow node {node_id!r} needs 'class_type' and 'inputs' "
                "(export it with 'Save (API Format)')"
            )


SHELL_INPUT_NAME = r"^AIRIG_INPUT_[1-9][0-9]{0,3}$"


class ShellPayload(Payload):
    """A command run by the worker. A string goes through /bin/sh; a list is exec'd as is."""

    command: (
        Annotated[str, StringConstraints(min_length=1, max_length=MAX_SHORT_CHARS)]
        | Annotated[
            list[Annotated[str, StringConstraints(max_length=MAX_SHORT_CHARS)]],
            Field(min_length=1, max_length=1_000),
        ]
    )
    cwd: DataPath = "."
    env: Annotated[
        dict[str, Annotated[str, StringConstraints(max_length=MAX_SHORT_CHARS)]],
        Field(max_length=64),
    ] = Field(default_factory=dict)
    # Filled by the brain, never by a plan: the upstream values the command's templates
    # named, which it reads as "${AIRIG_INPUT_<n>}" (the executor sets them as environment).
    inputs: Annotated[
        dict[Annotated[str, StringConstraints(pattern=SHELL_INPUT_NAME)], str],
        Field(max_length=1_000),
    ] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not name.replace("_", "").isalnum() or name[0].isdigit():
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value


class ResourcePayload(Payload):
    """Load or unload a model on one of the compute services."""

    action: Literal["load", "unload"]
    service: Literal["ollama", "comfyui", "whisper"]
    model: ModelName | None = None
    keep_alive: int | Annotated[str, StringConstraints(max_length=16)] | None = None
    options: Options | None = None
    wait_s: Annotated[float, Field(gt=0, le=900)] = 60.0

    @model_validator(mode="after")
    def _consistent(self) -> ResourcePayload:
        if self.service in ("ollama", "whisper") and not self.model:
            raise ValueError(f"'{self.service}' needs 'model'")
        if self.service == "comfyui" and self.action == "load":
            raise ValueError("ComfyUI loads checkpoints on first use; only 'unload' is supported")
        return self


class NoopFailure(Payload):
    error_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    retryable: bool = True
    message: ShortText = "noop task asked to fail"


class NoopPayload(Payload):
    """Returns its payload: measures dispatch overhead and drives orchestration tests."""

    echo: Any = None
    sleep_s: Annotated[float, Field(ge=0, le=3_600)] = 0.0
    fail: NoopFailure | None = None


class PlanPayload(Payload):
    """The brain's model proposes tasks (airig/brain/planner/, PLANS.md "The plan type").

    ``grow``: the answer's tasks join this task's plan; ``draft``: the answer is a whole plan
    for a goal, shown to the user before anything runs. ``catalogue`` and
    ``previous_errors`` are the brain's: it fills the first when a worker claims the task
    (task types, models, input files) and the second after an invalid answer, so the
    retry shows the model what the validator said. Whatever a plan puts there is replaced.
    """

    goal: Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)]
    mode: Literal["grow", "draft"] = "grow"
    instructions: LongText | None = None
    untrusted_input: LongText | None = None
    model: ModelName | None = None
    # Where the input files are (a folder on the data volume); listed into the catalogue.
    inputs_dir: DataPath | None = None
    options: Options | None = None
    catalogue: dict[str, Any] | None = None
    previous_errors: Annotated[list[dict[str, Any]], Field(max_length=200)] | None = None

    @field_validator("goal", "instructions", "untrusted_input")
    @classmethod
    def _no_forged_delimiter(cls, value: str | None) -> str | None:
        if value is not None and contains_reserved_delimiter(value):
            raise ValueError("contains a reserved <untrusted_data> delimiter")
        return value


MAX_FRAMES = 500
MAX_PAGES = 2_000
# A list of numbers, or a string a template filled: JSON text of such a list, or of objects
# with a `start` (topics), parsed by the executor once the template is rendered.
Seconds = Annotated[float, Field(ge=0, le=1e7)]
TimesField = (
    Annotated[list[Seconds], Field(min_length=1, max_length=MAX_FRAMES)]
    | Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)]
)


class FramesPayload(Payload):
    """Keyframes of a video (ffmpeg): at scene changes (default), every N seconds, or at
    given times. At most one of ``scene``, ``every_s`` and ``at``."""

    video: DataPath
    scene: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    every_s: Annotated[float, Field(gt=0, le=86_400)] | None = None
    at: TimesField | None = None
    max_frames: Annotated[int, Field(ge=1, le=MAX_FRAMES)] = 20
    out_dir: DataPath | None = None
    width: Annotated[int, Field(ge=16, le=7680)] = 640

    @model_validator(mode="after")
    def _one_mode(self) -> FramesPayload:
        given = [n for n in ("scene", "every_s", "at") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of 'scene', 'every_s', 'at' (got {given})")
        return self


# A fan-out group's output as a template inserts it (JSON text) or a plan writes it.
GroupOutput = Annotated[str, StringConstraints(max_length=4 * 1024 * 1024)] | dict[str, Any]


class PagesPayload(Payload):
    """Each page of a PDF as a PNG (pdftoppm), with its text layer (pdftotext). Or, for a
    fan-out over pages (recipes/pdf-text.yaml, executors/page_sets.py): ``collect``, a
    group of pages tasks' output made one list of pages; ``assemble``, a group of ocr
    tasks' output over that list written as one text file per PDF into ``out_dir``."""

    pdf: DataPath | None = None
    collect: GroupOutput | None = None
    assemble: GroupOutput | None = None
    dpi: Annotated[int, Field(ge=30, le=600)] = 150
    max_pages: Annotated[int, Field(ge=1, le=MAX_PAGES)] = 200
    out_dir: DataPath | None = None

    @model_validator(mode="after")
    def _one_input(self) -> PagesPayload:
        given = [n for n in ("pdf", "collect", "assemble") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'pdf', 'collect' or 'assemble'")
        if self.assemble is not None and self.out_dir is None:
            raise ValueError("'assemble' needs 'out_dir', the folder of the text files")
        return self


LanguageCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_+]{1,64}$")]


# What the onnx OCR engine's model (PP-OCRv4, executors/ocr_onnx.py) reads.
ONNX_OCR_LANGUAGES = ("eng", "chi_sim")


class OcrPayload(Payload):
    """Text out of images: a vision model, the onnx engine (PP-OCRv4 on onnxruntime,
    CUDA on an NVIDIA worker) or tesseract. ``auto`` uses the model when one is given and
    Ollama has it with the vision capability on a GPU worker, else the onnx engine where
    the worker has it and it reads the language, else tesseract."""

    image: DataPath | None = None
    images: ImageList | None = None
    engine: Literal["auto", "vision", "onnx", "tesseract"] = "auto"
    model: ModelName | None = None
    language: LanguageCode = "eng"
    options: Options | None = None

    @field_validator("model", mode="before")
    @classmethod
    def _no_model(cls, value: Any) -> Any:
        # A recipe's `{{ models.vision | optional }}` is "" on a rig that does not pull
        # the vision model (pdf-text on the default .env): no model, so auto is tesseract.
        return None if value == "" else value

    @model_validator(mode="after")
    def _inputs(self) -> OcrPayload:
        if (self.image is None) == (self.images is None):
            raise ValueError("give exactly one of 'image' or 'images'")
        if self.engine == "vision" and not self.model:
            raise ValueError("engine 'vision' needs 'model' (a vision model, e.g. qwen2.5vl:7b)")
        unread = [p for p in self.language.split("+") if p not in ONNX_OCR_LANGUAGES]
        if self.engine == "onnx" and unread:
            raise ValueError(
                f"engine 'onnx' (PP-OCRv4) reads {' and '.join(ONNX_OCR_LANGUAGES)}, not "
                f"{'+'.join(unread)}; use engine 'tesseract' (or 'auto') for that language"
            )
        return self


# What a template inserts (JSON text, plain text) or what a plan writes (a list, a mapping).
MAX_NOTE_INPUT_CHARS = 4 * 1024 * 1024  # BRAIN_MAX_RENDERED_BYTES' default
NoteInput = (
    Annotated[str, StringConstraints(max_length=MAX_NOTE_INPUT_CHARS)] | list[Any] | dict[str, Any]
)


# A csv column: a field path (``caption``, ``item.path``), its own header; or a mapping of
# one header to its path (``{file: item.name}``): the header a person reads in the sheet.
CsvText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
CsvColumn = CsvText | Annotated[dict[CsvText, CsvText], Field(min_length=1, max_length=1)]


class NotePayload(Payload):
    """A document a person reads, written onto the data volume from upstream outputs."""

    path: DataPath
    kind: Literal["video", "pages", "csv"]
    title: ShortText | None = None
    source: ShortText | None = None
    # video
    transcript: NoteInput | None = None
    topics: NoteInput | None = None
    frames: NoteInput | None = None
    descriptions: NoteInput | None = None
    # pages
    pages: NoteInput | None = None
    # csv
    rows: NoteInput | None = None
    columns: Annotated[list[CsvColumn], Field(min_length=1, max_length=200)] | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> NotePayload:
        if self.kind == "video" and self.transcript is None and self.frames is None:
            raise ValueError("kind 'video' needs 'transcript' or 'frames'")
        needs = {"video": (), "pages": ("pages",), "csv": ("rows", "columns")}
        missing = [name for name in needs[self.kind] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"kind {self.kind!r} needs {', '.join(repr(m) for m in missing)}")
        return self


class HtmlPayload(Payload):
    """An HTML page on the data volume as plain text (``path``, under outputs/) and its
    chunks as documents for an index, each with ``source`` (executors/html.py)."""

    html: DataPath
    path: DataPath
    title: Annotated[str, StringConstraints(max_length=1024)] | None = None
    source: Annotated[str, StringConstraints(max_length=1024)] | None = None
    chunk_chars: Annotated[int, Field(ge=200, le=8000)] = 2000
