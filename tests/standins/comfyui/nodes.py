"""Node catalogue and prompt validation of the ComfyUI stand-in.

Input specs are upstream's (Comfy-Org/ComfyUI nodes.py INPUT_TYPES of each class; the
samplers and schedulers are a subset of comfy/samplers.py KSampler.SAMPLERS/SCHEDULERS).
Validation follows execution.py validate_inputs / validate_prompt: each widget value is
converted with int() / float() / str() (invalid_input_type on failure), then checked
against the spec's "min" (value_smaller_than_min) and "max" (value_bigger_than_max), then
combos (value_not_in_list). The response to an invalid graph is 400 {"error": {...},
"node_errors": {id: {"errors": [...], "dependent_outputs": [...], "class_type": ...}}}.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_RESOLUTION = 16384  # nodes.py MAX_RESOLUTION


def INT(**spec: object) -> list:  # noqa: N802  (named after the ComfyUI type)
    return ["INT", spec]


def FLOAT(**spec: object) -> list:  # noqa: N802
    return ["FLOAT", spec]


SEED = INT(default=0, min=0, max=0xFFFFFFFFFFFFFFFF, control_after_generate=True)
STRENGTH = FLOAT(default=1.0, min=-100.0, max=100.0, step=0.01)  # nodes.py LoraLoader
SIZE = INT(default=1024, min=16, max=MAX_RESOLUTION, step=8)  # nodes.py EmptyLatentImage
STRING = ["STRING", {"multiline": True, "dynamicPrompts": True}]
SAMPLERS = ["euler", "euler_ancestral", "dpmpp_2m", "dpmpp_sde", "ddim", "uni_pc"]
SCHEDULERS = ["normal", "karras", "exponential", "sgm_uniform", "simple", "beta"]
CONVERT: dict[str, Callable[[object], object]] = {
    "INT": int,  # type: ignore[dict-item]
    "FLOAT": float,  # type: ignore[dict-item]
    "STRING": str,
    "BOOLEAN": bool,
}

# class_type -> (required inputs, output types, output node?, model folder per combo input)
# A required input spec is a type name (a link from another node), a primitive spec, or
# a model folder name in MODEL_INPUTS (a combo filled with the files on disk).
NODES: dict[str, tuple[dict[str, object], list[str], bool]] = {
    "CheckpointLoaderSimple": ({"ckpt_name": "@checkpoints"}, ["MODEL", "CLIP", "VAE"], False),
    "UNETLoader": (
        {
            "unet_name": "@diffusion_models",
            "weight_dtype": [["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]],
        },
        ["MODEL"],
        False,
    ),
    "CLIPLoader": (
        {"clip_name": "@text_encoders", "type": [["stable_diffusion", "flux"]]},
        ["CLIP"],
        False,
    ),
    "VAELoader": ({"vae_name": "@vae"}, ["VAE"], False),
    "LoraLoader": (
        {
            "model": "MODEL",
            "clip": "CLIP",
            "lora_name": "@loras",
            "strength_model": STRENGTH,
            "strength_clip": STRENGTH,
        },
        ["MODEL", "CLIP"],
        False,
    ),
    "CLIPTextEncode": ({"text": STRING, "clip": "CLIP"}, ["CONDITIONING"], False),
    "EmptyLatentImage": (
        {"width": SIZE, "height": SIZE, "batch_size": INT(default=1, min=1, max=4096)},
        ["LATENT"],
        False,
    ),
    "KSampler": (
        {
            "model": "MODEL",
            "seed": SEED,
            "steps": INT(default=20, min=1, max=10000),
            "cfg": FLOAT(default=8.0, min=0.0, max=100.0, step=0.1, round=0.01),
            "sampler_name": [SAMPLERS],
            "scheduler": [SCHEDULERS],
            "positive": "CONDITIONING",
            "negative": "CONDITIONING",
            "latent_image": "LATENT",
            "denoise": FLOAT(default=1.0, min=0.0, max=1.0, step=0.01),
        },
        ["LATENT"],
        False,
    ),
    "VAEDecode": ({"samples": "LATENT", "vae": "VAE"}, ["IMAGE"], False),
    "SaveImage": (
        {"images": "IMAGE", "filename_prefix": ["STRING", {"default": "ComfyUI"}]},
        [],
        True,
    ),
    "PreviewImage": ({"images": "IMAGE"}, [], True),
}


def object_info(list_models: Callable[[str], list[str]]) -> dict:
    """GET /object_info: each node's inputs (combos listing the files on disk)."""
    info = {}
    for class_type, (required, outputs, output_node) in NODES.items():
        spec = {}
        for name, kind in required.items():
            if isinstance(kind, str) and kind.startswith("@"):
                spec[name] = [list_models(kind[1:]), {"tooltip": f"files in models/{kind[1:]}"}]
            else:
                spec[name] = [kind] if isinstance(kind, str) else kind
        info[class_type] = {
            "input": {"required": spec, "optional": {}},
            "input_order": {"required": list(required)},
            "output": outputs,
            "output_is_list": [False] * len(outputs),
            "output_name": outputs,
            "name": class_type,
            "display_name": class_type,
            "description": "",
            "python_module": "nodes",
            "category": "stand-in",
            "output_node": output_node,
        }
    return info


def _error(kind: str, message: str, details: str = "", **extra: object) -> dict:
    return {"type": kind, "message": message, "details": details, "extra_info": extra}


def _spec(kind: object, list_models) -> tuple[object, dict]:
    """(input_type, extra_info) as execution.py get_input_info returns them; a combo's
    type is its list of options (a model combo lists the files on disk)."""
    if isinstance(kind, str) and kind.startswith("@"):
        return list_models(kind[1:]), {"tooltip": f"files in models/{kind[1:]}"}
    if isinstance(kind, str):
        return kind, {}
    assert isinstance(kind, list)
    return kind[0], dict(kind[1]) if len(kind) > 1 else {}


def _check_link(prompt: dict, name: str, input_type: object, info: list, value: list) -> list:
    """execution.py validate_inputs, a linked input: [node_id, slot]."""
    if len(value) != 2 or str(value[0]) not in prompt:
        message = "Bad linked input, must be a length-2 list of [node_id, slot_index]"
        extra = {"input_name": name, "input_config": info, "received_value": value}
        return [_error("bad_linked_input", message, name, **extra)]
    source = NODES.get(prompt[str(value[0])].get("class_type"), ({}, [], False))[1]
    slot = value[1] if isinstance(value[1], int) else -1
    received = source[slot] if 0 <= slot < len(source) else None
    if isinstance(input_type, str) and received != input_type:
        return [
            _error(
                "return_type_mismatch",
                "Return type mismatch between linked nodes",
                f"{name}, received_type({received}) mismatch input_type({input_type})",
                input_name=name,
                input_config=info,
                received_type=received,
                linked_node=value,
            )
        ]
    return []


def _check_widget(inputs: dict, name: str, input_type: object, extra: dict, info: list) -> list:
    """execution.py validate_inputs, a widget value: convert, then min, max, combo."""
    value = inputs[name]
    if isinstance(value, dict) and "__value__" in value:
        value = inputs[name] = value["__value__"]
    if isinstance(input_type, str) and input_type in CONVERT:
        try:
            value = inputs[name] = CONVERT[input_type](value)
        except Exception as exc:  # noqa: BLE001  (upstream catches every conversion error)
            return [
                _error(
                    "invalid_input_type",
                    f"Failed to convert an input value to a {input_type} value",
                    f"{name}, {value}, {exc}",
                    input_name=name,
                    input_config=info,
                    received_value=value,
                    exception_message=str(exc),
                )
            ]
    bounds = {"input_name": name, "input_config": info, "received_value": value}
    if "min" in extra and value < extra["min"]:
        message = f"Value {value} smaller than min of {extra['min']}"
        return [_error("value_smaller_than_min", message, name, **bounds)]
    if "max" in extra and value > extra["max"]:
        message = f"Value {value} bigger than max of {extra['max']}"
        return [_error("value_bigger_than_max", message, name, **bounds)]
    if isinstance(input_type, list) and value not in input_type:
        big = len(input_type) > 20  # "Don't send back gigantic lists"
        listing = f"(list of length {len(input_type)})" if big else str(input_type)
        return [
            _error(
                "value_not_in_list",
                "Value not in list",
                f"{name}: {value!r} not in {listing}",
                input_name=name,
                input_config=None if big else info,
                received_value=value,
            )
        ]
    return []


def _validate_node(prompt: dict, node_id: str, list_models, seen: dict) -> bool:
    """Validate a node and everything it links to; `seen` maps id -> (valid, errors)."""
    if node_id in seen:
        return seen[node_id][0]
    seen[node_id] = (True, [])  # guards against cycles while this node is being checked
    errors: list = []
    valid = True
    inputs = prompt[node_id].get("inputs") or {}
    for name, kind in NODES[prompt[node_id]["class_type"]][0].items():
        if name not in inputs:
            errors.append(
                _error("required_input_missing", "Required input is missing", name, input_name=name)
            )
            continue
        input_type, extra = _spec(kind, list_models)
        info = [input_type, extra]
        value = inputs[name]
        if isinstance(value, list):
            found = _check_link(prompt, name, input_type, info, value)
            if not found:
                valid = _validate_node(prompt, str(value[0]), list_models, seen) and valid
        else:
            found = _check_widget(inputs, name, input_type, extra, info)
        errors += found
    seen[node_id] = (valid and not errors, errors)
    return seen[node_id][0]


def validate_prompt(prompt: object, list_models) -> tuple[dict | None, list[str], dict]:
    """(error, good output node ids, node_errors) as ComfyUI's validate_prompt."""
    if not isinstance(prompt, dict) or not prompt:
        return _error("no_prompt", "No prompt provided", "No prompt provided"), [], {}
    for node_id, node in prompt.items():
        class_type = node.get("class_type") if isinstance(node, dict) else None
        if class_type is None:
            return (
                _error(
                    "invalid_prompt",
                    "Cannot execute because a node is missing the class_type property.",
                    f"Node ID '#{node_id}'",
                ),
                [],
                {},
            )
        if class_type not in NODES:
            return (
                _error(
                    "invalid_prompt",
                    f"Cannot execute because node {class_type} does not exist.",
                    f"Node ID '#{node_id}'",
                ),
                [],
                {},
            )
    outputs = [i for i, node in prompt.items() if NODES[node["class_type"]][2]]
    if not outputs:
        return _error("prompt_no_outputs", "Prompt has no outputs"), [], {}
    good, node_errors, seen = [], {}, {}
    for output in outputs:
        if _validate_node(prompt, output, list_models, seen):
            good.append(output)
            continue
        for node_id, (_, errors) in seen.items():
            if errors:
                entry = node_errors.setdefault(
                    node_id,
                    {
                        "errors": errors,
                        "dependent_outputs": [],
                        "class_type": prompt[node_id]["class_type"],
                    },
                )
                entry["dependent_outputs"].append(output)
    if not good:
        # Only each failed output's *own* reasons make the summary (errors += [(o, reasons)]
        # in validate_prompt): a graph broken upstream of SaveImage has details "".
        details = "\n".join(
            f"{e['message']}: {e['details']}" for output in outputs for e in seen[output][1]
        )
        return (
            _error("prompt_outputs_failed_validation", "Prompt outputs failed validation", details),
            [],
            node_errors,
        )
    return None, good, node_errors
