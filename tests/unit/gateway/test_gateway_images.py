"""Images through the gateway (issue 39 §3): each provider's request shape for them, and
the gateway's own check against its provider's limits before the provider is called (a
refusal there is a 422 the brain does not retry, and nothing billed)."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from airig.gateway.app import create_app
from airig.gateway.failures import Scrubber
from airig.gateway.providers import AnthropicProvider, Image, Message, OpenAIProvider, Prompt
from tests import image_samples as samples
from tests.unit.gateway.test_gateway_app import AUTH, KEY, TOKEN, FakeProvider

PNG = samples.png(64, 48)
PNG64 = base64.b64encode(PNG).decode()


def with_images(*images: dict, role: str = "user") -> dict:
    return {
        "request_id": "call-1",
        "system": "",
        "messages": [{"role": role, "content": "what is in it?", "images": list(images)}],
        "max_tokens": 50,
    }


def api(name: str = "openai") -> tuple[TestClient, FakeProvider]:
    provider = FakeProvider()
    provider.name = name  # type: ignore[misc]
    app = create_app(provider, TOKEN, Scrubber(KEY), key_loaded=True)
    return TestClient(app), provider


def prompt_with_image() -> Prompt:
    return Prompt("sys", (Message("user", "what is in it?", (Image("image/png", PNG64),)),), 50)


def test_openai_gets_the_text_and_an_image_url_data_url():
    request = OpenAIProvider("gpt-4.1-mini", KEY, "", 10).request(prompt_with_image())
    assert request["messages"][1]["content"] == [
        {"type": "text", "text": "what is in it?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
    ]


def test_anthropic_gets_an_image_block_with_a_base64_source_before_the_text():
    request = AnthropicProvider("claude-sonnet-5-5", KEY, "", 10).request(prompt_with_image())
    assert request["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}},
        {"type": "text", "text": "what is in it?"},
    ]


def test_text_alone_stays_a_string():
    prompt = Prompt("", (Message("user", "hi"),), 5)
    assert AnthropicProvider("m", KEY, "", 10).request(prompt)["messages"][0]["content"] == "hi"


@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_a_good_image_reaches_the_provider(name):
    client, provider = api(name)
    answer = client.post("/v1/complete", headers=AUTH,
                         json=with_images({"media_type": "image/png", "data": PNG64}))  # fmt: skip
    assert answer.status_code == 200, answer.text
    (message,) = provider.prompts[0].messages
    assert message.images == (Image("image/png", PNG64),)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_said(data: bytes | str) -> dict:
    return {"media_type": "image/png", "data": data if isinstance(data, str) else b64(data)}


BIG = samples.png(8, 8, pad=4 * 1024 * 1024)
REFUSED = {
    "a zip said to be a PNG": ("openai", png_said(samples.zip_file()), "is not a PNG, JPEG"),
    "text said to be a PNG": ("anthropic", png_said(samples.TEXT), "is not a PNG, JPEG"),
    "a GIF said to be a PNG": ("anthropic", png_said(samples.gif()), "but its bytes are image/gif"),
    "a data URL as the data": ("openai", png_said(f"data:image/png;base64,{PNG64}"), "base64"),
    "base64 with a NUL": ("openai", png_said(PNG64[:8] + "\x00" + PNG64[8:]), "not valid base64"),
    "over Anthropic's 5 MB": ("anthropic", png_said(BIG), "bytes of base64; the limit is 5242880"),
    "over Anthropic's 8000 px": ("anthropic", png_said(samples.png(8001, 2)), "at most 8000 px"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_image_the_provider_would_refuse_is_refused_before_it_is_called(case):
    name, image, why = REFUSED[case]
    client, provider = api(name)
    answer = client.post("/v1/complete", headers=AUTH, json=with_images(image))
    assert answer.status_code == 422, answer.text
    assert why in answer.json()["detail"] and answer.json()["retryable"] is False
    assert provider.prompts == []


def test_a_wrong_media_type_is_refused_by_the_body_model():
    client, provider = api()
    bad = with_images({"media_type": "image/bmp", "data": b64(samples.bmp())})
    assert client.post("/v1/complete", headers=AUTH, json=bad).status_code == 422
    assert provider.prompts == []


def test_only_a_user_turn_carries_images():
    client, provider = api()
    answer = client.post("/v1/complete", headers=AUTH,
                         json=with_images({"media_type": "image/png", "data": PNG64},
                                          role="assistant"))  # fmt: skip
    assert answer.status_code == 422 and "only a user turn has images" in answer.json()["detail"]


def test_anthropic_lowers_the_side_past_20_images():
    client, provider = api("anthropic")
    wide = {"media_type": "image/png", "data": b64(samples.png(2001, 2))}
    answer = client.post("/v1/complete", headers=AUTH, json=with_images(*[wide] * 21))
    assert answer.status_code == 422 and "at most 2000 px" in answer.json()["detail"]
    fine = client.post("/v1/complete", headers=AUTH, json=with_images(*[wide] * 20))
    assert fine.status_code == 200


def test_more_images_than_the_provider_takes_are_refused():
    client, provider = api("anthropic")
    small = {"media_type": "image/png", "data": b64(samples.png(2, 2))}
    body = with_images(*[small] * 60)
    body["messages"].append({"role": "assistant", "content": "and?"})
    body["messages"].append({"role": "user", "content": "more", "images": [small] * 41})
    answer = client.post("/v1/complete", headers=AUTH, json=body)
    assert answer.status_code == 422
    assert answer.json()["detail"] == "101 images; the external tier takes at most 100"
