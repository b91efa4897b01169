"""Benchmark: the kit's verifier against `sha256sum`, and a re-verify from the cache.

Usage: python benchmarks/verify_bench.py [--size-mb 1024] [--file PATH] [--rounds 2]

Hashes the same file with ``airig.provision.verify.sha256_file`` and with
``sha256sum`` side by side (alternating, best of ``--rounds`` each, file warm in the page
cache for both so the comparison is of hashing, not of the disk), prints both rates and
the ratio (target ≥ 0.95), then times a full verification twice through the
verification cache, with the init containers' default settle pause: the second run of unchanged
files should take milliseconds.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airig.provision.cache import VerifyCache  # noqa: E402
from airig.provision.verify import ExpectedFile, Verifier, sha256_file  # noqa: E402

MIB = 1024 * 1024


def make_file(directory: Path, size_mb: int) -> Path:
    path = directory / "bench.bin"
    block = os.urandom(MIB)
    with open(path, "wb") as handle:
        for index in range(size_mb):
            # Vary each block so no layer can dedupe or compress the file away.
            handle.write(index.to_bytes(8, "little") + block[8:])
    return path


def timed(action) -> tuple[float, str]:
    start = time.perf_counter()
    digest = action()
    return time.perf_counter() - start, digest


def sha256sum(path: Path) -> str:
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def compare(path: Path, rounds: int) -> tuple[float, float]:
    """Best wall time of each hasher over ``rounds`` alternating runs."""
    kit, tool = [], []
    for _ in range(rounds):
        seconds, tool_digest = timed(lambda: sha256sum(path))
        tool.append(seconds)
        seconds, kit_digest = timed(lambda: sha256_file(path))
        kit.append(seconds)
        if kit_digest != tool_digest:
            sys.exit(f"digests differ: kit {kit_digest} sha256sum {tool_digest}")
    return min(kit), min(tool)


def reverify(path: Path, digest: str, cache_file: Path) -> tuple[float, float]:
    """Seconds for a cold (hashing) and a warm (cached) full verification."""
    times = []
    for _ in range(2):
        cache = VerifyCache(cache_file)
        verifier = Verifier(cache)  # the default settle pause, as in the init containers
        start = time.perf_counter()
        verifier.verify([ExpectedFile(path, path.stat().st_size, digest)])
        cache.save()
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--file", type=Path, help="hash this file instead of a generated one")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("sha256sum") is None:
        sys.exit("sha256sum not found")
    with tempfile.TemporaryDirectory(prefix="airig-bench-") as scratch:
        path = args.file or make_file(Path(scratch), args.size_mb)
        size_mb = path.stat().st_size / MIB
        sha256_file(path)  # warm the page cache for both contenders
        kit, tool = compare(path, args.rounds)
        print(f"file: {path} ({size_mb:.0f} MiB)")
        print(f"sha256sum      : {size_mb / tool:8.1f} MiB/s  ({tool:.3f} s)")
        print(f"airig verifier : {size_mb / kit:8.1f} MiB/s  ({kit:.3f} s)")
        print(f"ratio (airig / sha256sum): {tool / kit:.3f}  (target >= 0.95)")
        cold, warm = reverify(path, sha256_file(path), Path(scratch) / "verified.json")
        print(f"verify, empty cache : {cold * 1000:9.1f} ms")
        print(f"verify, cache hit   : {warm * 1000:9.1f} ms (unchanged file, no hashing)")


if __name__ == "__main__":
    main()
