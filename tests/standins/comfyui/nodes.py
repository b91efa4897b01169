"""Node catalogue and prompt validation of the ComfyUI stand-in.

Error shapes follow ComfyUI's execution.py (validate_prompt / validate_inputs): the
response to an invalid graph is {"error": {...}, "node_errors": {id: {"errors": [...],
"dependent_outputs": [...], "class_type": ...}}}.
"""

from __future__ import annotations

from collections.abc import Callable

INT = ["INT", {"default": 0, "min": 0, "max": 0xFFFFFFFFFFFFFFFF}]
FLOAT = ["FLOAT", {"default": 1.0, "min": 0.0, "max": 100.0}]
STRING = ["STRING", {"multiline": True}]
SAMPLERS = ["euler", "euler_ancestral", "dpmpp_2m", "dpmpp_sde", "ddim", "uni_pc"]
SCHEDULERS = ["normal", "karras", "exponential", "sgm_uniform", "simple", "beta"]

# class_type -> (required inputs, output types, output node?, model folder per combo input)
# A required input spec is a type name (a link from another node), a primitive spec, or
# a model folder name in MODEL_INPUTS (a combo filled with the files on disk).
NODES: dict[str, tuple[dict[str, object], list[str], bool]] = {
    "CheckpointLoaderSimple": ({"ckpt_name": "@checkpoints"}, ["MODEL", "CLIP", "VAE"], False),
    "UNETLoader": (
        {"unet_name": "@diffusion_models", "weight_dtype": [["default", "fp8_e4m3fn"]]},
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
            "strength_model": FLOAT,
            "strength_clip": FLOAT,
        },
        ["MODEL", "CLIP"],
        False,
    ),
    "CLIPTextEncode": ({"text": STRING, "clip": "CLIP"}, ["CONDITIONING"], False),
    "EmptyLatentImage": ({"width": INT, "height": INT, "batch_size": INT}, ["LATENT"], False),
    "KSampler": (
        {
            "model": "MODEL",
            "seed": INT,
            "steps": INT,
            "cfg": FLOAT,
            "sampler_name": [SAMPLERS],
            "scheduler": [SCHEDULERS],
            "positive": "CONDITIONING",
            "negative": "CONDITIONING",
            "latent_image": "LATENT",
            "denoise": FLOAT,
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


def _check_input(prompt: dict, name: str, kind: object, value: object, options: list) -> list:
    """Errors for one input value, in ComfyUI's vocabulary."""
    if isinstance(value, list):
        if len(value) != 2 or str(value[0]) not in prompt:
            return [
                _error(
                    "bad_linked_input",
                    "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                    name,
                    input_name=name,
                )
            ]
        source = NODES.get(prompt[str(value[0])].get("class_type"), ({}, [], False))[1]
        slot = value[1] if isinstance(value[1], int) else -1
        received = source[slot] if 0 <= slot < len(source) else None
        if isinstance(kind, str) and not kind.startswith("@") and received != kind:
            return [
                _error(
                    "return_type_mismatch",
                    "Return type mismatch between linked nodes",
                    f"{name}, received_type({received}) mismatch input_type({kind})",
                    input_name=name,
                )
            ]
        return []
    if isinstance(kind, list) and kind[0] in ("INT", "FLOAT"):
        try:
            (int if kind[0] == "INT" else float)(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return [
                _error(
                    "invalid_input_type",
                    f"Failed to convert an input value to a {kind[0]} value",
                    f"{name}, {value}",
                    input_name=name,
                    received_value=value,
                )
            ]
    if options and value not in options[0]:
        listing = options[0] if len(options[0]) <= 20 else f"(list of length {len(options[0])})"
        return [
            _error(
                "value_not_in_list",
                "Value not in list",
                f"{name}: '{value}' not in {listing}",
                input_name=name,
                input_config=options,
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
        value = inputs[name]
        options: list = []
        if isinstance(kind, str) and kind.startswith("@"):
            options = [list_models(kind[1:])]
        elif isinstance(kind, list) and isinstance(kind[0], list):
            options = [kind[0]]
        found = _check_input(prompt, name, kind, value, options)
        errors += found
        if isinstance(value, list) and not found:
            valid = _validate_node(prompt, str(value[0]), list_models, seen) and valid
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
        details = "\n".join(
            f"{e['message']}: {e['details']}"
            for entry in node_errors.values()
            for e in entry["errors"]
        )
        return (
            _error("prompt_outputs_failed_validation", "Prompt outputs failed validation", details),
            [],
            node_errors,
        )
    return None, good, node_errors
