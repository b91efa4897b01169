"""OCR engines side by side: pages per second and character error rate (CER) of tesseract
and the onnx engine (PaddleOCR's PP-OCRv4 on onnxruntime, airig/executors/ocr_onnx.py) on
this machine's CPU, on pages whose text is known.

Usage: python benchmarks/ocr_engines.py [--pages 5] [--json results/ocr_engines.json]

Each page is an A4 page at 200 dpi (what recipes/pdf-text.yaml renders: 1654 x 2339
pixels) of 30 lines of seeded random English words, numbers and punctuation in DejaVu Sans
12 pt, drawn by Pillow. ``--pages`` of them clean, as many again "scanned": turned by
0.6 degrees, blurred, grey paper with noise, saved as JPEG at quality 70. Both engines
read every page through the ocr task's real executor (``run_task("ocr", ...)``, one page a
task, as pdf-text's page fan-out runs them), in the same run, interleaved page by page so
a busy host slows both alike. The onnx engine's one-time model load is timed apart (a
worker loads it once per process).

CER: the Levenshtein distance between what an engine read and the page's text (both with
runs of whitespace made one space) over the text's length; the distance row by row in
numpy (insertions by a running minimum), so a 2,000-character page takes milliseconds.

``CER no spaces`` compares the texts with every space taken out: what is left is misread
or lost characters, not words run together (PP-OCRv4's Chinese-and-English recognition
model drops the spaces of some English lines).

Target: ``engine: auto``'s choice on a CPU worker (airig/executors/ocr.py: tesseract for
the languages it reads) holds, i.e. the onnx engine is not both faster and more accurate
than tesseract here; exits 1 when it is, since auto should then choose it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airig.executors.base import run_task  # noqa: E402
from airig.executors.context import ExecContext  # noqa: E402

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
DPI = 200
A4 = (round(8.27 * DPI), round(11.69 * DPI))
LINES = 30
VOCABULARY = (
    "the of and to in is for on that by with as at from this are be or an it which was "
    "invoice total payment received March April order number account balance due date "
    "shipping address customer report page section figure table summary results method "
    "water power station bridge river north south eastern western village market school "
    "Kiwix archive offline library index search engine model worker brain queue rig"
)
WORDS = VOCABULARY.split()
ENGINES = ("tesseract", "onnx")


def page_text(rng: random.Random) -> list[str]:
    lines = []
    for _ in range(LINES):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 58:
            roll = rng.random()
            if roll < 0.12:
                words.append(str(rng.randint(1, 99_999)))
            elif roll < 0.18:
                words.append(rng.choice(WORDS).capitalize() + rng.choice(",.:;"))
            else:
                words.append(rng.choice(WORDS))
        lines.append(" ".join(words))
    return lines


def draw_page(lines: list[str], scanned: bool, rng: random.Random) -> Image.Image:
    font = ImageFont.truetype(FONT, round(12 * DPI / 72))
    page = Image.new("L", A4, 255)
    draw = ImageDraw.Draw(page)
    y = 180
    for line in lines:
        draw.text((170, y), line, fill=0, font=font)
        y += round(12 * DPI / 72 * 1.5)
    if not scanned:
        return page
    page = page.rotate(0.6, resample=Image.Resampling.BICUBIC, fillcolor=255)
    page = page.filter(ImageFilter.GaussianBlur(0.8))
    noise = np.random.default_rng(rng.randint(0, 2**31)).normal(0, 14, (A4[1], A4[0]))
    grey = np.asarray(page, dtype=np.float64) * 0.88 + 18 + noise
    return Image.fromarray(np.clip(grey, 0, 255).astype(np.uint8))


def normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def distance(a: str, b: str) -> int:
    """Levenshtein distance, one numpy row per character of ``a``."""
    if not a or not b:
        return max(len(a), len(b))
    codes_b = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    steps = np.arange(len(b) + 1)
    row = steps.copy()
    for i, char in enumerate(a, start=1):
        cost = (codes_b != ord(char)).astype(np.int64)
        candidate = np.empty_like(row)
        candidate[0] = i
        candidate[1:] = np.minimum(row[1:] + 1, row[:-1] + cost)  # deletion, substitution
        # insertion: row[j] = min over k <= j of candidate[k] + (j - k)
        row = np.minimum.accumulate(candidate - steps) + steps
    return int(row[-1])


def cer(read: str, truth: str) -> float:
    return distance(normal(read), normal(truth)) / max(1, len(normal(truth)))


def context(data: Path) -> ExecContext:
    return ExecContext(
        ollama_url="http://127.0.0.1:9",
        comfyui_url="http://127.0.0.1:9",
        whisper_url="http://127.0.0.1:9",
        data_dir=data,
        output_dir=data / "out",
        timeout_s=600,
        cancel=threading.Event(),
        trusted=True,
    )


def tesseract_version() -> str:
    out = subprocess.run(["tesseract", "--version"], capture_output=True, text=True)
    return (out.stdout or out.stderr).splitlines()[0]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=5, help="clean pages (as many scanned)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    rng = random.Random(39)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        (data / "out").mkdir()
        pages = []
        for kind in ("clean", "scanned"):
            for n in range(args.pages):
                lines = page_text(rng)
                name = f"{kind}-{n}.{'jpg' if kind == 'scanned' else 'png'}"
                image = draw_page(lines, kind == "scanned", rng)
                image.save(data / name, **({"quality": 70} if kind == "scanned" else {}))
                pages.append((kind, name, "\n".join(lines)))
        ctx = context(data)
        start = time.perf_counter()
        warm = run_task("ocr", {"image": pages[0][1], "engine": "onnx"}, ctx).output
        load_s = time.perf_counter() - start
        timings: dict[tuple[str, str], list[float]] = {}
        errors: dict[tuple[str, str], list[float]] = {}
        spaceless: dict[tuple[str, str], list[float]] = {}
        for kind, name, truth in pages:
            for engine in ENGINES:
                ctx = context(data)
                began = time.perf_counter()
                output = run_task("ocr", {"image": name, "engine": engine}, ctx).output
                timings.setdefault((engine, kind), []).append(time.perf_counter() - began)
                errors.setdefault((engine, kind), []).append(cer(output["text"], truth))
                unspaced = cer(output["text"].replace(" ", ""), truth.replace(" ", ""))
                spaceless.setdefault((engine, kind), []).append(unspaced)
    figures = {
        "cpus": os.cpu_count(),
        "tesseract": tesseract_version(),
        "onnx_providers": warm.get("providers"),
        "onnx_load_s": round(load_s, 2),
        "page": f"A4 at {DPI} dpi, {A4[0]} x {A4[1]} pixels, {LINES} lines",
        "rows": [],
    }
    print(f"{os.cpu_count()} CPUs; {figures['tesseract']}; onnx engine on "
          f"{warm.get('providers')}, model load (once a worker) "
          f"{load_s:.2f} s")  # fmt: skip
    print(f"{'engine':<10} {'pages':<8} {'n':>3} {'pages/s':>8} {'s/page':>7} "
          f"{'CER mean':>9} {'CER max':>8} {'CER no spaces':>14}")  # fmt: skip
    for engine in ENGINES:
        for kind in ("clean", "scanned", "all"):
            kinds = ("clean", "scanned") if kind == "all" else (kind,)
            times = [t for k in kinds for t in timings[(engine, k)]]
            rates = [e for k in kinds for e in errors[(engine, k)]]
            unspaced = [e for k in kinds for e in spaceless[(engine, k)]]
            row = {
                "engine": engine,
                "pages": kind,
                "n": len(times),
                "pages_per_s": round(len(times) / sum(times), 3),
                "s_per_page_median": round(statistics.median(times), 2),
                "cer_mean": round(statistics.fmean(rates), 4),
                "cer_max": round(max(rates), 4),
                "cer_no_spaces_mean": round(statistics.fmean(unspaced), 4),
            }
            figures["rows"].append(row)
            print(f"{engine:<10} {kind:<8} {row['n']:>3} {row['pages_per_s']:>8.3f} "
                  f"{row['s_per_page_median']:>7.2f} {row['cer_mean']:>9.2%} "
                  f"{row['cer_max']:>8.2%} {row['cer_no_spaces_mean']:>14.2%}")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    every = {r["engine"]: r for r in figures["rows"] if r["pages"] == "all"}
    onnx, tess = every["onnx"], every["tesseract"]
    better = onnx["pages_per_s"] > tess["pages_per_s"] and onnx["cer_mean"] < tess["cer_mean"]
    print(f"target: auto's CPU choice (tesseract) holds, the onnx engine not both faster and "
          f"more accurate: {'MISSED' if better else 'met'}")  # fmt: skip
    return 1 if better else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
