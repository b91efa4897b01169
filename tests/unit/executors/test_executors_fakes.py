"""Executors against fake clients: request shape, metrics and error mapping."""

from __future__ import annotations

import threading

import ollama
import pytest
from support import HANG_GUARD_S

from airig.common.task_schemas import ImagePayload
from airig.executors import base, ollama_common
from airig.executors.base import run_task, validate_payload
from airig.executors.context import TaskError, run_abortable
from airig.executors.image import build_txt2img_graph, summarise_node_errors


def stream(chunks):
    """A generator, as the client returns for stream=True (it has close())."""
    yield from chunks


class FakeOllama:
    """Records each call; answers with a canned response or raises a canned error."""

    def __init__(self, response=None, error=None):
        self.calls: list[tuple[str, dict]] = []
        self.response, self.error = response, error

    def _answer(self, name, kwargs):
        self.calls.append((name, kwargs))
        if self.error is not None:
            raise self.error
        return self.response

    def generate(self, **kwargs):
        final = self._answer("generate", kwargs)
        if not kwargs.get("stream"):
            return final
        # As Ollama streams: the text in pieces, then a last chunk with the counters.
        pieces = [final.model_copy(update={"response": c, "done": False}) for c in final.response]
        return stream([*pieces, final.model_copy(update={"response": ""})])

    def chat(self, **kwargs):
        final = self._answer("chat", kwargs)
        empty = final.message.model_copy(update={"content": ""})
        return stream(
            [final.model_copy(update={"done": False}), final.model_copy(update={"message": empty})]
        )

    def close(self):
        pass


@pytest.fixture
def ctx(make_ctx):
    return make_ctx()


@pytest.fixture
def fake(monkeypatch):
    client = FakeOllama()
    monkeypatch.setattr(ollama_common, "make_client", lambda ctx: client)
    return client


def generate_response(**extra):
    values = dict(model="m", response="hi", done=True, done_reason="stop")
    return ollama.GenerateResponse(**{**values, **extra})


def test_llm_metrics_come_from_ollamas_counters(ctx, fake):
    fake.response = generate_response(
        eval_count=100,
        eval_duration=2_000_000_000,
        prompt_eval_count=7,
        load_duration=1_500_000,
        total_duration=2_600_000_000,
    )
    result = run_task("llm", {"model": "m", "prompt": "p"}, ctx)
    assert result.output == {
        "text": "hi",
        "model": "m",
        "done_reason": "stop",
        "untrusted_wrapped": False,
    }
    metrics = result.metrics
    assert (metrics["tokens_per_s"], metrics["tokens_completion"]) == (50.0, 100)
    assert (metrics["tokens_prompt"], metrics["load_ms"], metrics["run_ms"]) == (7, 1.5, 2600.0)


def test_pinned_load_options_win_over_requested_ones(ctx, fake):
    fake.response = generate_response()
    ctx.model_options = {"m:latest": {"num_ctx": 8192}}
    payload = {"model": "m", "prompt": "p", "options": {"num_ctx": 2048, "temperature": 0}}
    result = run_task("llm", payload, ctx)
    assert fake.calls[0][1]["options"] == {"num_ctx": 8192, "temperature": 0}
    assert result.metrics["options_overridden"] == ["num_ctx"]


def test_chat_sends_messages_and_returns_the_reply(ctx, fake):
    fake.response = ollama.ChatResponse(
        model="m", message={"role": "assistant", "content": "yo"}, done=True
    )
    payload = {"model": "m", "messages": [{"role": "user", "content": "q"}], "system": "S"}
    result = run_task("llm", payload, ctx)
    assert fake.calls[0][0] == "chat"
    assert fake.calls[0][1]["messages"][0] == {"role": "system", "content": "S"}
    assert result.output["text"] == "yo"


@pytest.mark.parametrize(
    ("error", "error_type", "retryable"),
    [
        (ollama.ResponseError("model 'm' not found", 404), "model_not_found", False),
        (ollama.ResponseError("CUDA error: out of memory", 500), "oom", True),
        (ollama.ResponseError("invalid options", 400), "bad_input", False),
        (ollama.ResponseError("server busy", 503), "service_unavailable", True),
        (ConnectionError("refused"), "service_unreachable", True),
    ],
)
def test_ollama_failures_map_to_exact_error_types(ctx, fake, error, error_type, retryable):
    fake.error = error
    with pytest.raises(TaskError) as caught:
        run_task("llm", {"model": "m", "prompt": "p"}, ctx)
    assert (caught.value.error_type, caught.value.retryable) == (error_type, retryable)


class BlockedCall:
    """A blocking call that runs until released (a hang guard at most) and says whether it
    started and whether it ended."""

    def __init__(self, on_start=lambda: None) -> None:
        self.on_start = on_start
        self.started, self.released, self.ended = (threading.Event() for _ in range(3))

    def __call__(self) -> str:
        self.started.set()
        self.on_start()
        self.released.wait(HANG_GUARD_S)
        self.ended.set()
        return "finished"


def test_run_abortable_returns_on_cancel_without_waiting_for_the_call(ctx):
    ctx.timeout_s = 3600.0  # only the cancel can end it before the call does
    aborted = threading.Event()
    call = BlockedCall(on_start=ctx.cancel.set)  # cancelled while the call is running
    try:
        with pytest.raises(TaskError) as caught:
            run_abortable(ctx, call, aborted.set)
        assert caught.value.error_type == "cancelled"
        assert aborted.is_set()
        assert call.started.is_set() and not call.ended.is_set()
    finally:
        call.released.set()


def test_run_abortable_stops_at_the_deadline(ctx):
    ctx.timeout_s = 0.2
    call = BlockedCall()
    try:
        with pytest.raises(TaskError) as caught:
            run_abortable(ctx, call, lambda: None)
        assert caught.value.error_type == "timeout"
        assert not call.ended.is_set()  # it gave up on the call, it did not wait it out
    finally:
        call.released.set()


def test_run_abortable_passes_results_and_errors_through(ctx):
    assert run_abortable(ctx, lambda: 42, lambda: None) == 42
    with pytest.raises(KeyError):
        run_abortable(ctx, lambda: {}["x"], lambda: None)


def test_txt2img_graph_is_wired_end_to_end():
    payload = ImagePayload(prompt="a cat", checkpoint="sd.safetensors", negative_prompt="dog")
    graph = build_txt2img_graph(payload, seed=5)
    classes = [node["class_type"] for node in graph.values()]
    assert classes == [
        "CheckpointLoaderSimple",
        "CLIPTextEncode",
        "CLIPTextEncode",
        "EmptyLatentImage",
        "KSampler",
        "VAEDecode",
        "SaveImage",
    ]
    for node in graph.values():  # every link points at an existing node
        for value in node["inputs"].values():
            if isinstance(value, list):
                assert value[0] in graph
    assert graph["5"]["inputs"]["seed"] == 5
    assert graph["3"]["inputs"]["text"] == "dog"


def test_node_errors_are_summarised_and_missing_models_recognised():
    body = {
        "error": {"type": "prompt_outputs_failed_validation", "message": "Prompt failed"},
        "node_errors": {
            "1": {
                "class_type": "CheckpointLoaderSimple",
                "errors": [
                    {
                        "type": "value_not_in_list",
                        "message": "Value not in list",
                        "details": "ckpt_name: 'x.safetensors' not in []",
                    }
                ],
            }
        },
    }
    summary, missing = summarise_node_errors(body)
    assert summary == (
        "node 1 (CheckpointLoaderSimple): Value not in list: ckpt_name: 'x.safetensors' not in []"
    )
    assert missing
    assert summarise_node_errors({"error": "no prompt", "node_errors": []}) == ("no prompt", False)


def test_noop_echoes_and_can_fail_on_request(ctx):
    assert run_task("noop", {"echo": [1]}, ctx).output["echo"] == [1]
    with pytest.raises(TaskError) as caught:
        run_task("noop", {"fail": {"error_type": "boom", "retryable": False}}, ctx)
    assert (caught.value.error_type, caught.value.retryable) == ("boom", False)


class WatchedEvent(threading.Event):
    """A cancel event that says when someone starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_on = threading.Event()

    def wait(self, timeout=None):
        self.waited_on.set()
        return super().wait(timeout)


def test_noop_sleep_honours_cancel(make_ctx):
    ctx = make_ctx(cancel=WatchedEvent(), timeout_s=3600.0)
    outcome: list[TaskError] = []

    def sleep_an_hour() -> None:
        try:
            run_task("noop", {"sleep_s": 3600}, ctx)
        except TaskError as exc:
            outcome.append(exc)

    sleeper = threading.Thread(target=sleep_an_hour, daemon=True)
    sleeper.start()
    assert ctx.cancel.waited_on.wait(HANG_GUARD_S), "noop never waited on cancel"
    ctx.cancel.set()
    sleeper.join(HANG_GUARD_S)
    assert not sleeper.is_alive(), "noop kept sleeping after the cancel"
    assert [e.error_type for e in outcome] == ["cancelled"]


def test_unknown_type_and_bad_payload_are_not_retryable(ctx):
    with pytest.raises(TaskError) as caught:
        run_task("teleport", {}, ctx)
    assert (caught.value.error_type, caught.value.retryable) == ("bad_input", False)
    with pytest.raises(TaskError) as caught:
        validate_payload("llm", {"model": "m", "prompt": 3})
    assert caught.value.details["errors"][0]["field"] == "prompt"


def test_an_unexpected_executor_crash_becomes_a_task_error(ctx, monkeypatch):
    def broken(payload, ctx):
        raise RuntimeError("bug")

    monkeypatch.setitem(base.EXECUTORS, "noop", broken)
    with pytest.raises(TaskError) as caught:
        run_task("noop", {}, ctx)
    assert caught.value.error_type == "executor_error"
    assert "RuntimeError: bug" in caught.value.message


def test_a_cancelled_attempt_does_not_start(ctx):
    ctx.cancel.set()
    with pytest.raises(TaskError, match="cancelled"):
        run_task("noop", {}, ctx)


def test_cancel_mid_stream_closes_the_stream(ctx, fake):
    closed = threading.Event()

    def endless(**kwargs):
        try:
            while True:
                yield ollama.GenerateResponse(model="m", response="tok ", done=False)
                ctx.cancel.set()
        finally:
            closed.set()  # the client closes the HTTP response here: Ollama stops

    fake.generate = endless
    with pytest.raises(TaskError, match="cancelled"):
        run_task("llm", {"model": "m", "prompt": "p"}, ctx)
    assert closed.wait(1)
