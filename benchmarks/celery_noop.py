"""The Celery side of the dispatch benchmark: one no-op task on a Redis broker.

Celery and redis-py are benchmark-only tools (``pip install celery redis``), not
dependencies of airig. The broker URL comes from ``BENCH_REDIS_URL``.
"""

from __future__ import annotations

import os
import time

from celery import Celery

REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
app = Celery("celery_noop", broker=f"{REDIS}/0", backend=f"{REDIS}/1")
app.conf.update(worker_hijack_root_logger=False, result_expires=600)


@app.task
def noop(index: int) -> float:
    """Return when the task finished, for the latency of the same task in airig."""
    return time.time()
