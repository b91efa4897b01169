"""Facts → findings: pure functions, one per class of the compute runbook (no I/O).

Each finding carries its evidence (a log line, a probe's answer, a counter), the one
action to take first (file or knob, the change, why), how to check it and the rollback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from statistics import median

from airig.common.gpu_use import comfyui_cpu_device, ollama_cpu_models
from airig.common.jsonlog import utc_iso
from airig.launcher.views.triage.alerts import with_alerts, with_model_sync
from airig.launcher.views.triage.backend import gpu_label, offered
from airig.launcher.views.triage.facts import (
    AGENTS,
    FLAPPING,
    GPU_FALLBACK,
    MEMORY,
    MODEL_SYNC,
    STARTUP_CRASH,
    STOPPED,
    UNREACHABLE,
    ContainerFacts,
    Facts,
    Finding,
)
from airig.launcher.views.triage.match import runs_worker, worker_container, worker_fix, worker_name

OOM_LINE = re.compile(
    r"out of memory|OutOfMemory|cudaMalloc failed|hipErrorOutOfMemory|"
    r"failed to allocate|requires more system memory|insufficient memory",
    re.I,
)
CPU_DEVICE_LINE = re.compile(r"(device\W{0,3}cpu\b|fall(?:ing|s)? back to cpu)", re.I)
# A successful request's access line: the common log format (Python's http.server, the
# stand-ins), uvicorn's and aiohttp's (speaches, ComfyUI), quotes JSON-escaped or not; and
# Ollama's gin line (`[GIN] … | 200 | … | GET "/api/version"`).
ACCESS_LINE = re.compile(
    r'\\?"(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) \S+ HTTP/[\d.]+\\?" [123]\d\d\b'
    r"|\[GIN\][^|]*\|\s*[123]\d\d\s*\|"
)
ERROR_LINE = re.compile(
    r"error|exception|traceback|fatal|panic|fail|cannot|can't|refused|denied|not found|"
    r"killed|abort|invalid|unable",
    re.I,
)
STOP_EXITS = (0, 137, 143)
RESTARTING_POLICIES = ("always", "unless-stopped")
MIN_STARTS = 3  # a cadence needs at least two gaps
STEADY = 0.25  # every gap within 25 % of the median gap
MATCH = 0.2  # a period within 20 % of a timeout "matches" it
LOG_EVIDENCE = 3
# A run shorter than this share of the restart period did not stay up: a crash, not a flap.
CRASH_RUN_SHARE = 0.25
START = {
    "Docker": "start the daemon (sudo systemctl start docker) and check you may use it",
    "the kit": "start it: python start_services.py",
    "the brain": "read `python start_services.py logs brain`; restart the stack with `up`",
    "models verify": "run `python start_services.py models verify` and read its error",
}


def classify(facts: Facts) -> list[Finding]:
    """Every finding, in the runbook's order; [] for a healthy kit and only then. The
    brain's active alerts join the finding of their cause, or stand as their own; a model
    that failed verification because its service is down joins that service's finding."""
    found: list[Finding] = list(unreachable(facts))
    for c in facts.containers:
        found += stopped(c)
        found += crash(c)
        found += flapping(c)
        found += memory(c)
        found += gpu_fallback(c, facts)
    found += proof_fallback(facts)
    found += vram_full(facts)
    found += agents(facts)
    found = with_alerts(found, facts)
    return with_model_sync(found, facts, model_sync(facts))


def _last(lines: Iterable[str], n: int = LOG_EVIDENCE) -> tuple[str, ...]:
    kept = [line.strip() for line in lines if line.strip()]
    return tuple(kept[-n:])


def telling(lines: Iterable[str], n: int = LOG_EVIDENCE) -> tuple[str, ...]:
    """The log lines that can show a failure: never a successful request's access line
    (a healthcheck's `GET /health 200` says the service answered); the last error lines
    when there are any, else the last lines."""
    kept = [line for line in lines if not ACCESS_LINE.search(line)]
    errors = [line for line in kept if ERROR_LINE.search(line)]
    return _last(errors or kept, n)


def stopped_by_user(c: ContainerFacts) -> bool:
    """Not running, with the exit a stop gives (0: it exited on SIGTERM, 143: killed by
    SIGTERM, 137: SIGKILL at the end of the stop timeout, no OOM kill), after a `stop`
    event (docker stop, compose stop) later than its last start; or, the stop before the
    window, under a restart policy that would have started it again had it exited by
    itself."""
    if c.status != "exited" or c.oom_killed or c.exit_code not in STOP_EXITS:
        return False
    if c.stops:
        return max(c.stops) >= max(c.starts, default=0.0)
    return c.restart_policy in RESTARTING_POLICIES


def unreachable(facts: Facts) -> Iterator[Finding]:
    for what, why in facts.unreachable:
        action = START.get(what, f"start {what}")
        yield Finding(
            UNREACHABLE, what, f"{what}: triage cannot look there", (why,), action,
            "python start_services.py doctor", "nothing to roll back",
        )  # fmt: skip


def stopped(c: ContainerFacts) -> Iterator[Finding]:
    if not stopped_by_user(c):
        return
    if c.stops:
        when = f" at {utc_iso(max(c.stops))}"
        why = f"after a `stop` event{when}"
    else:
        when = ""
        why = f"and restart policy {c.restart_policy} did not start it again"
    yield Finding(
        STOPPED, c.service, f"{c.service} was stopped{when}, it did not crash",
        (f"state {c.status}, exit code {c.exit_code} {why}",),
        f"if it should run, start it: `python start_services.py restart {c.service}`",
        f"python start_services.py status: {c.service} running and healthy",
        f"stop it again if that was meant: docker stop {c.name}",
    )  # fmt: skip


def crash(c: ContainerFacts) -> Iterator[Finding]:
    """Exited with an error, restarting, unhealthy or restarted within the window (an OOM
    kill is `memory`, a stop is `stopped`)."""
    # the one verdict (compose/container.py); its restarts are judged here by the window
    broken = not c.state.is_done() and c.state.failure(c.restart_count) is not None
    restarted = c.restart_count > 0 and bool(c.starts)  # restarted within --since
    if c.oom_killed or stopped_by_user(c) or not (broken or restarted):
        return
    state = c.status + (f" ({c.health})" if c.health else "")
    evidence = (
        f"state {state}, exit code {c.exit_code}, restart count {c.restart_count}",
        *(f"health: {line}" for line in _last(c.health_log, 1)),
        *(f"log: {line}" for line in telling(c.log_tail)),
    )
    yield Finding(
        STARTUP_CRASH, c.service, f"{c.service} {state}, restarted {c.restart_count}×",
        evidence,
        f"read the first error in `python start_services.py logs {c.service}`; fix the "
        f"setting it names in .env (the {c.stack} stack), not the code, first",
        f"python start_services.py status: {c.service} running and healthy, restart count "
        "no longer rising",
        "restore the .env line you changed, then `python start_services.py up`",
    )  # fmt: skip


def _dies_at_once(c: ContainerFacts, period: float) -> bool:
    """A crash loop caught in the instant it runs: each run ended in an error exit well
    before the period was up. On a slow host each start takes seconds, so a crash loop's
    starts are steady and it can read `running` when triage looks (issue 36's CI run)."""
    runs = [
        died - max(start for start in c.starts if start <= died)
        for died, code in c.dies
        if code != 0 and any(start <= died for start in c.starts)
    ]
    return len(runs) >= 2 and median(runs) < CRASH_RUN_SHARE * period


def flap_period(starts: Iterable[float]) -> float | None:
    """The steady period between restarts in seconds, or None when there is no cadence."""
    times = sorted(starts)
    if len(times) < MIN_STARTS:
        return None
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    mid = median(gaps)
    if mid <= 0 or any(abs(g - mid) > STEADY * mid for g in gaps):
        return None
    return mid


def flapping(c: ContainerFacts) -> Iterator[Finding]:
    """A service that comes up and goes down at a steady cadence. One that is restarting
    or exited now is a crash loop instead: Docker's restart backoff (doubling to a 1 min
    cap) gives a crash loop a steady cadence too, but it never stays up in between."""
    period = flap_period(c.starts)
    if period is None or c.status != "running" or _dies_at_once(c, period):
        return
    hc = c.healthcheck
    budget = hc.budget_s if hc else None
    figures = f"restarts every {period:.0f}s ({len(c.starts)} starts)"
    if hc is not None and budget:
        figures += (
            f"; healthcheck budget {budget:.0f}s = start_period {hc.start_period_s:.0f}s "
            f"+ interval {hc.interval_s:.0f}s × retries {hc.retries}"
        )
    matches = budget is not None and abs(period - budget) <= MATCH * budget
    if matches:
        action = (
            f"the period matches the healthcheck budget: the service is declared dead before "
            f"it is ready; raise `start_period` of {c.service}'s healthcheck in "
            f"{c.stack}/compose.yaml (e.g. ×2) before touching performance knobs"
        )
    else:
        action = (
            "the period does not match the healthcheck budget: look for a wait timeout or a "
            f"crash at the same point of each start in `logs {c.service}`; change that "
            "timeout or the setting the log names"
        )
    yield Finding(
        FLAPPING, c.service, f"{c.service} flaps: {figures.split(';')[0]}",
        (figures, *(f"log: {line}" for line in telling(c.log_tail))), action,
        f"triage --since 1h shows no flapping for {c.service} after a full period",
        f"restore the previous value in {c.stack}/compose.yaml or .env and run `up`",
    )  # fmt: skip


def memory(c: ContainerFacts) -> Iterator[Finding]:
    lines = _last((line for line in c.log_tail if OOM_LINE.search(line)), 2)
    if not (c.oom_killed or lines):
        return
    evidence = ((f"OOMKilled: true, exit code {c.exit_code}",) if c.oom_killed else ()) + tuple(
        f"log: {line}" for line in lines
    )
    yield Finding(
        MEMORY, c.service, f"{c.service} ran out of memory",
        evidence,
        "lower the memory pressure first, lowest risk first: OLLAMA_CONTEXT_LENGTH or "
        "OLLAMA_MAX_LOADED_MODELS in .env, then a smaller model (AIRIG_OLLAMA_MODELS, "
        "AIRIG_WHISPER_MODELS); GPU offload depth last",
        f"no OOM line in `logs {c.service}` and OOMKilled false after the next load",
        "restore the previous .env value and run `up`",
    )  # fmt: skip


def vram_full(facts: Facts) -> Iterator[Finding]:
    for w in facts.workers or ():
        for gpu in w.get("gpus") or ():
            total, free = gpu.get("vram_total_mb") or 0, gpu.get("vram_free_mb") or 0
            if total and (total - free) / total >= facts.vram_full_fraction:
                yield Finding(
                    MEMORY, str(w.get("name")),
                    f"GPU {gpu.get('index')} VRAM nearly full on {w.get('name')}",
                    (f"GPU {gpu.get('index')}: {total - free} of {total} MB used "
                     f"(resident: {', '.join(w.get('resident_models') or []) or '-'})",),
                    "unload or shrink what is resident on that GPU: a smaller quantisation in "
                    ".env, or fewer models kept loaded (OLLAMA_MAX_LOADED_MODELS)",
                    "status: that GPU's free VRAM above 5 %",
                    "restore the previous .env value and run `up`",
                )  # fmt: skip


def gpu_fallback(c: ContainerFacts, facts: Facts) -> Iterator[Finding]:
    if not c.gpu_requested:
        return
    evidence = ollama_cpu_models(facts.ollama_ps.get(c.name, ()))
    evidence += comfyui_cpu_device(facts.comfyui_devices.get(c.name, ()))
    if c.service.startswith("whisper"):
        if c.env.get("WHISPER__INFERENCE_DEVICE", "").lower() == "cpu":
            evidence.append("env: WHISPER__INFERENCE_DEVICE=cpu")
        cpu_lines = (line for line in c.log_tail if CPU_DEVICE_LINE.search(line))
        evidence += [f"log: {line}" for line in _last(cpu_lines)]
    if evidence:
        gpu = offered(c)  # what the engine gave it, so the reader knows which stack to check
        given = (f"docker: given {gpu}",) if gpu is not None else ()
        yield Finding(
            GPU_FALLBACK, c.service, f"{c.service}{gpu_label(c)} was given a GPU but runs on "
            "the CPU", (*evidence, *given),
            "check the GPU is visible inside it (`python start_services.py detect`), then "
            "the model fits its VRAM (a smaller model in .env); keep the CPU fallback if the "
            "GPU cannot be used safely",
            f"triage {c.service}: no fallback finding; /api/ps size_vram ≈ size",
            "restore the previous .env value and run `up`",
        )  # fmt: skip


def proof_fallback(facts: Facts) -> Iterator[Finding]:
    """A service `up` put on its CPU image because no GPU image passed its proof on this
    host: the GPU it should use does nothing for it, and only the proof said why."""
    for service, move in sorted(facts.proof_moves.items()):
        if not isinstance(move, dict) or move.get("on_gpu", True):
            continue
        yield Finding(
            GPU_FALLBACK, service,
            f"{service} runs its CPU image: its GPU image failed its proof on "
            f"{move.get('gpu', '?')} (driver {move.get('driver', '?')})",
            (f"proof: {move.get('from', '?')} said \"{move.get('said', '?')}\"",
             f"now: {move.get('to', '?')}"),
            str(move.get("fix") or "read the quoted line"),
            "python start_services.py up --reprove: the proof passes and the service runs "
            "its GPU image",
            "AIRIG_PROOF=off in .env trusts the catalogue again (the failure then shows at "
            "the first model load)",
        )  # fmt: skip


def model_sync(facts: Facts) -> Iterator[Finding]:
    for row in facts.bad_models or ():
        service, model = row.get("service", "?"), row.get("model", "?")
        yield Finding(
            MODEL_SYNC, str(service), f"{service} model {model} failed verification",
            (f"models verify: {model}: {row.get('error') or 'not verified'} "
             f"(size {row.get('size')}, present {row.get('present')})",),
            f"re-fetch it: `python start_services.py models pull -s {service} {model}` "
            "(a bad file is deleted and fetched anew, then verified); if it keeps failing, "
            "check the model name in .env and the volume's free space",
            f"python start_services.py models verify -s {service}",
            "nothing to roll back: pull only replaces a file that failed verification",
        )  # fmt: skip


def agents(facts: Facts) -> Iterator[Finding]:
    yield from _missing_workers(facts)
    if facts.workers is None:
        return
    workers = facts.workers
    names = [str(w.get("name") or "") for w in workers]
    for c in facts.containers:
        if not c.service.startswith("worker") or c.status != "running":
            continue
        expected = worker_name(c)
        if not any(runs_worker(c, n) for n in names):
            yield Finding(
                AGENTS, c.service, f"{c.service} runs but is not registered at the brain",
                (f"container {c.name} (worker name {expected}) is not in the brain's "
                 f"{len(workers)} workers",
                 *(f"log: {line}" for line in telling(c.log_tail))),
                "read its log for the brain URL or token it was refused with; fix "
                "the brain URL or worker token in .env (AIRIG_JOIN_BRAIN_URL on a joined rig)",
                "status lists the worker",
                "restore the .env line and run `up`",
            )  # fmt: skip
    for w in workers:
        yield from _worker_state(w, worker_container(str(w.get("name")), facts.containers))


def _missing_workers(facts: Facts) -> Iterator[Finding]:
    """Fewer worker containers than the plan has (the CPU replicas, the GPU overlay)."""
    for service, wanted in sorted(facts.expected_workers.items()):
        have = sum(c.service == service for c in facts.containers)
        if have < wanted:
            yield Finding(
                AGENTS, service, f"{service}: {have} of {wanted} containers exist",
                (f"the plan has {wanted} × {service}; Docker lists {have}",),
                "run `python start_services.py up` (it creates what is missing); "
                "AIRIG_CPU_WORKERS in .env sets the CPU replicas",
                f"status lists {wanted} × {service}", "nothing to roll back",
            )  # fmt: skip


def _worker_state(w: dict[str, object], c: ContainerFacts | None) -> Iterator[Finding]:
    name = str(w.get("name"))
    # a worker that stopped cleanly deregistered: if its container should run, the
    # container checks say so; the brain has nothing silent to report
    if not w.get("alive") and not w.get("stopped"):
        fix = (
            "read why it stopped (`python start_services.py logs {service}`), then "
            "`python start_services.py restart {service}`"
        )
        yield Finding(
            AGENTS, name, f"worker {name} is silent (no heartbeat within the lease)",
            (f"last_heartbeat {w.get('last_heartbeat')}",
             *((f"container {c.name} ({c.service}) {c.status}",) if c else ())),
            worker_fix(w, c, fix),
            "status shows it alive", "nothing to roll back",
        )  # fmt: skip
    yield from _idle_with_work(w, name, c)
    warnings = [str(x) for x in w.get("warnings") or ()]  # type: ignore[attr-defined]
    if w.get("thermal_blocked") or warnings:
        yield Finding(
            AGENTS, name, f"worker {name} is held back: {'; '.join(warnings) or 'thermal'}",
            tuple(warnings) or ("thermal_blocked: true",),
            "cool the GPU (airflow, power limit); AIRIG_THERMAL_LIMIT_C in .env only if the "
            "card is rated for more",
            "status shows no warning for it", "restore the previous threshold",
        )  # fmt: skip


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _idle_with_work(w: dict[str, object], name: str, c: ContainerFacts | None) -> Iterator[Finding]:
    """Alive, running nothing, tasks of its classes READY, and no claim for longer than the
    brain's own patience (``idle_limit_s``: the residency wait plus a lease), so a worker
    rightly waiting for its model's GPU is not flagged. A thermal pause has its own finding."""
    idle, limit, ready = (
        _number(w.get("idle_s")),
        _number(w.get("idle_limit_s")),
        w.get("ready_for_it"),
    )
    if not w.get("alive") or w.get("thermal_blocked") or w.get("running") or not limit:
        return
    if not isinstance(ready, int) or ready <= 0 or idle <= limit:
        return
    yield Finding(
        AGENTS, name, f"worker {name} has claimed nothing for {idle:.0f}s while {ready} tasks wait",
        (f"/v1/workers: {name} idle_s {idle:.0f} (limit {limit:.0f}), ready_for_it {ready}, "
         f"classes {w.get('classes')}, running 0",),
        worker_fix(w, c,
            "read its log (`python start_services.py logs {service}`) for refused claims or a "
            "stuck swap; if it serves classes nothing routes to it (WORKER_CLASSES / "
            "AIRIG_CPU_WORKER_CLASSES), fix the classes; else `python start_services.py "
            "restart {service}`"),
        "status: its running count above 0, or triage without this finding",
        "nothing to roll back (a restart changes no setting)",
    )  # fmt: skip
