"""VRAM fit warnings: known tags, parsed sizes, suggestions, silence when unknown."""

from __future__ import annotations

import pytest

from airig.provision.fit import GB, check_fit, estimate_bytes

SIX_GB = 6 * 1024**3


@pytest.mark.parametrize(
    ("model", "gb"),
    [
        ("qwen2.5:7b-instruct-q4_K_M", 4.7),
        ("qwen2.5", 4.7),
        ("nomic-embed-text", 0.27),
        ("qwen2.5:7b-instruct-q8_0", 4.7 * 1.07 / 0.62),
        ("someone/custom:13b-q4_0", 13 * 0.62),
        ("phi3:mini", 2.2),
    ],
)
def test_estimates(model: str, gb: float) -> None:
    assert estimate_bytes(model) == pytest.approx(gb * GB, rel=0.01)


def test_unknown_name_gives_no_estimate_and_no_warning() -> None:
    assert estimate_bytes("mystery:latest") is None
    assert check_fit(["mystery:latest"], [1]) == []


def test_seed_defaults_fit_a_6gb_card() -> None:
    assert check_fit(["qwen2.5:7b-instruct-q4_K_M", "nomic-embed-text"], [SIX_GB]) == []


def test_too_big_model_warns_with_a_smaller_sibling() -> None:
    [warning] = check_fit(["qwen2.5:32b"], [SIX_GB])
    assert warning.startswith("qwen2.5:32b needs about 24.0 GB")
    assert warning.endswith("try qwen2.5:7b")


def test_unknown_family_suggests_a_general_model() -> None:
    [warning] = check_fit(["someone/custom:70b"], [4 * 1024**3])
    assert "try phi3:3.8b" in warning  # the largest known model that fits


def test_vram_of_several_gpus_adds_up() -> None:
    assert check_fit(["qwen2.5:14b"], [SIX_GB, SIX_GB]) == []


def test_cpu_only_hosts_get_no_warning() -> None:
    assert check_fit(["qwen2.5:72b"], []) == []


def test_models_that_fit_alone_but_not_together_warn_once() -> None:
    [warning] = check_fit(["qwen2.5:7b", "llama3.1:8b"], [8 * 1024**3])
    assert "together" in warning and "swap" in warning
