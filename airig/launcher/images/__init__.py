"""The image per compute service: the catalogue of variants (catalog.py) and the choice
(choose.py). This face hands their public names on."""

from airig.launcher.images.catalog import (
    CATALOG_FILE,
    VARIABLE,
    Catalog,
    Variant,
    capability_fits,
    driver_fits,
    gfx_of_override,
    load_catalog,
    misfit,
    parse_catalog,
    version_tuple,
)
from airig.launcher.images.choose import (
    ImageChoice,
    ImageSelection,
    choose_images,
    comfyui_flag_clash,
    pins_from,
)

__all__ = [
    "CATALOG_FILE",
    "VARIABLE",
    "Catalog",
    "ImageChoice",
    "ImageSelection",
    "Variant",
    "capability_fits",
    "choose_images",
    "comfyui_flag_clash",
    "driver_fits",
    "gfx_of_override",
    "load_catalog",
    "misfit",
    "parse_catalog",
    "pins_from",
    "version_tuple",
]
