"""Images to the external tier over real HTTP (issue 39 §3): the real gateway process in
front of the provider stand-in, which checks each image as upstream documents it
(tests/standins/provider/images.py names the sources) and refuses as upstream does. The
stand-in's refusals are shown with each provider's official client, the way upstream
answers them; the gateway's own check keeps such an image from the provider at all."""

from __future__ import annotations

import base64
import concurrent.futures

import anthropic
import openai
import pytest
import requests
from standins.conftest_helpers import StandIn, start_standin
from standins.provider.control import DEFAULT_KEY, ProviderControl
from standins.provider.gateway import GatewayProcess, gateway_base_url, start_gateway

from tests import image_samples as samples

PROVIDERS = ["openai", "anthropic"]
PNG = samples.png(320, 200)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> StandIn:
    standin = start_standin("provider", tmp_path_factory.mktemp("provider") / "root")
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def gateways(provider, tmp_path_factory) -> dict[str, GatewayProcess]:
    root = tmp_path_factory.mktemp("gateways")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        started = {
            name: pool.submit(start_gateway, root / name, name,
                              gateway_base_url(name, provider.url))
            for name in PROVIDERS
        }  # fmt: skip
        running = {name: future.result() for name, future in started.items()}
    yield running
    for gateway in running.values():
        gateway.stop()


@pytest.fixture
def control(provider) -> ProviderControl:
    control = ProviderControl(provider.url)
    control.reset()
    return control


def ask(gateway: GatewayProcess, request_id: str, *images: dict) -> requests.Response:
    body = {
        "request_id": request_id,
        "system": "You describe pictures.",
        "messages": [{"role": "user", "content": "what is in it?", "images": list(images)}],
        "max_tokens": 50,
    }
    return requests.post(gateway.url + "/v1/complete", headers=gateway.headers, json=body,
                         timeout=30)  # fmt: skip


@pytest.mark.parametrize("name", PROVIDERS)
def test_an_image_reaches_the_provider_in_its_apis_shape(name, gateways, control):
    answer = ask(gateways[name], f"img-{name}", {"media_type": "image/png", "data": b64(PNG)})
    assert answer.status_code == 200, answer.text
    (call,) = control.requests()
    assert call["status"] == 200  # the stand-in took the image as upstream would
    content = call["body"]["messages"][-1]["content"]
    if name == "openai":
        url = f"data:image/png;base64,{b64(PNG)}"
        assert content[1] == {"type": "image_url", "image_url": {"url": url}}
    else:
        assert content[0] == {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": b64(PNG)}}  # fmt: skip
    assert answer.json()["text"].startswith(f"[{call['body']['model']}] ")


@pytest.mark.parametrize("name", PROVIDERS)
def test_a_lying_image_never_reaches_the_provider(name, gateways, control):
    answer = ask(
        gateways[name], f"liar-{name}", {"media_type": "image/png", "data": b64(samples.zip_file())}
    )
    assert answer.status_code == 422 and answer.json()["retryable"] is False
    assert "is not a PNG, JPEG, GIF or WebP file" in answer.json()["detail"]
    assert control.requests() == []


# ------------------------------------------------------------ the stand-in refuses as upstream
def openai_image(provider: StandIn, url: str) -> openai.BadRequestError:
    client = openai.OpenAI(api_key=DEFAULT_KEY, base_url=provider.url + "/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gpt-4.1-mini", max_tokens=10, messages=[{
            "role": "user", "content": [{"type": "text", "text": "what is it?"},
                                        {"type": "image_url", "image_url": {"url": url}}],
        }])  # fmt: skip
    return refused.value


def anthropic_image(provider: StandIn, *sources: dict) -> anthropic.BadRequestError:
    client = anthropic.Anthropic(api_key=DEFAULT_KEY, base_url=provider.url, max_retries=0)
    blocks = [{"type": "image", "source": source} for source in sources]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-sonnet-5-5", max_tokens=10, messages=[{
            "role": "user", "content": [*blocks, {"type": "text", "text": "what is it?"}],
        }])  # fmt: skip
    return refused.value


def test_the_openai_standin_refuses_a_malformed_data_url(provider, control):
    for url in (
        f"data:image/png,{b64(PNG)}",
        "file:///etc/passwd",
        f"data:image/png;base64,{b64(PNG)}!",
    ):
        refused = openai_image(provider, url)
        assert refused.status_code == 400 and refused.code == "invalid_value"
        assert refused.param == "messages[0].content[1].image_url.url"


def test_the_openai_standin_refuses_what_is_no_image_of_its_formats(provider, control):
    for data in (samples.zip_file(), samples.TEXT, samples.bmp()):
        refused = openai_image(provider, f"data:image/png;base64,{b64(data)}")
        assert refused.status_code == 400 and refused.code == "invalid_image_format"


def test_the_anthropic_standin_refuses_a_wrong_media_type(provider, control):
    refused = anthropic_image(provider, {"type": "base64", "media_type": "image/bmp",
                                         "data": b64(samples.bmp())})  # fmt: skip
    assert refused.status_code == 400
    assert (
        "media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
        in str(refused)
    )


def test_the_anthropic_standin_refuses_bytes_that_are_not_the_media_type(provider, control):
    refused = anthropic_image(provider, {"type": "base64", "media_type": "image/png",
                                         "data": b64(samples.TEXT)})  # fmt: skip
    assert "Image does not match the provided media type image/png" in str(refused)


def test_the_anthropic_standin_refuses_an_image_over_5_mb(provider, control):
    big = samples.png(8, 8, pad=4 * 1024 * 1024)
    refused = anthropic_image(
        provider, {"type": "base64", "media_type": "image/png", "data": b64(big)}
    )
    assert "image exceeds 5 MB maximum" in str(refused)


def test_the_anthropic_standin_refuses_a_side_over_its_limit(provider, control):
    refused = anthropic_image(provider, {"type": "base64", "media_type": "image/png",
                                         "data": b64(samples.png(8001, 1))})  # fmt: skip
    assert "exceed max allowed size: 8000 pixels" in str(refused)
    wide = {"type": "base64", "media_type": "image/png", "data": b64(samples.png(2001, 1))}
    crowded = anthropic_image(provider, *[wide] * 21)
    assert "exceed max allowed size: 2000 pixels" in str(crowded)
