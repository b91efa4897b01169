"""Delivers alert notices to people through Apprise (ntfy, Slack, Discord, Matrix, e-mail,
plain webhooks: one URL scheme each), off the brain's threads.

``send`` only appends to a queue, so neither the reaper nor a claim ever waits on a
receiver. One daemon thread delivers each target's queue in order; a target that fails is
retried with exponential backoff (``initial_s`` doubling up to ``cap_s``: the brain
passes ``BRAIN_RETRY_INITIAL_S`` and ``BRAIN_RETRY_CAP_S``, 2 s to 300 s by default) and keeps its
queue, while the other targets go on. Each attempt is bounded by Apprise's connect/read
timeouts (4 s each by default; ``?cto=&rto=`` on a URL changes them).

The queue is in memory and bounded: ``max_pending`` notices per target (default 1000);
past it the oldest is dropped and logged. A brain restart loses what was still queued;
the ``alert_fired`` / ``alert_cleared`` events in the database and the events log keep
every notice regardless.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import apprise

from airig.brain.ops.alerts import Notice

log = logging.getLogger("airig.brain.ops.notify")


def parse_urls(text: str) -> list[str]:
    """AIRIG_ALERT_URLS: Apprise URLs separated by spaces or commas."""
    return [url for url in re.split(r"[\s,]+", text) if url]


# A notice quotes names and errors that reach the brain from outside (a joined rig's
# worker names, a service's error text). Receivers read their own markup: Slack's
# <!channel> and <@U…>, Discord's and Matrix's @everyone / @room, Markdown links. Apprise
# escapes plain text only for HTML receivers, so the rest is neutralised here: one line,
# no control characters, mentions broken by a zero-width space, and the brackets of
# links and Slack's control sequences replaced by look-alikes.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")
_LOOK_ALIKES = str.maketrans({"<": "‹", ">": "›", "[": "⟦", "]": "⟧"})
MAX_NOTICE_CHARS = 1000


def for_receivers(text: str) -> str:
    """``text`` made safe to show in any receiver's markup, as one bounded line."""
    text = _CONTROL.sub(" ", text).translate(_LOOK_ALIKES)
    text = text.replace("@", "@\u200b")
    return text[:MAX_NOTICE_CHARS]


def apprise_sender(url: str) -> Callable[[Notice], bool]:
    """One target's send function; False when Apprise could not deliver."""
    target = apprise.Apprise()
    quiet = logging.getLogger("apprise")
    quiet.disabled = True  # Apprise logs a URL it cannot parse, secrets included
    try:
        added = target.add(url)
    finally:
        quiet.disabled = False
    if not added:
        raise ValueError("not an Apprise URL")

    def send(notice: Notice) -> bool:
        kind = apprise.NotifyType.FAILURE if notice.fired else apprise.NotifyType.SUCCESS
        return bool(
            target.notify(
                title=for_receivers(notice.title),
                body=for_receivers(notice.message),
                notify_type=kind,
                # Plain text in: Apprise escapes it for receivers that read HTML.
                body_format=apprise.NotifyFormat.TEXT,
            )
        )

    return send


@dataclass
class _Target:
    name: str
    send: Callable[[Notice], bool]
    pending: deque[Notice] = field(default_factory=deque)
    failures: int = 0
    next_try: float = 0.0


class Notifier:
    def __init__(
        self,
        urls: list[str],
        max_pending: int = 1000,
        initial_s: float = 1.0,
        cap_s: float = 300.0,
        sender: Callable[[str], Callable[[Notice], bool]] = apprise_sender,
    ) -> None:
        self.max_pending = max_pending
        self.initial_s = initial_s
        self.cap_s = cap_s
        self.targets: list[_Target] = []
        for number, url in enumerate(urls, 1):
            try:
                self.targets.append(_Target(f"target {number}", sender(url)))
            except Exception:  # the URL holds secrets: log its position only
                log.error("AIRIG_ALERT_URLS entry %d is not a valid Apprise URL; skipped", number)
        self.attempts = 0  # delivery attempts so far, failed or not (tests wait on it)
        self.delivered = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.targets and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="notifier", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread:
            self._thread.join(timeout=10)

    def send(self, notices: list[Notice]) -> None:
        """Queue notices for every target; never blocks on delivery."""
        if not notices or not self.targets:
            return
        with self._wake:
            for target in self.targets:
                for notice in notices:
                    if len(target.pending) >= self.max_pending:
                        dropped = target.pending.popleft()
                        log.warning("%s: queue full, dropped %s", target.name, dropped.title)
                    target.pending.append(notice)
            self._wake.notify_all()

    def pending(self) -> int:
        with self._wake:
            return sum(len(target.pending) for target in self.targets)

    def _due(self, now: float) -> tuple[_Target, Notice] | float:
        """The next (target, notice) to try now, or how long to wait for one."""
        wait = 60.0
        for target in self.targets:
            if target.pending:
                if target.next_try <= now:
                    return target, target.pending[0]
                wait = min(wait, target.next_try - now)
        return wait

    def _run(self) -> None:
        while True:
            with self._wake:
                due = self._due(time.monotonic())
                while isinstance(due, float) and not self._stopping:
                    self._wake.wait(due)
                    due = self._due(time.monotonic())
                if self._stopping:
                    return
            assert not isinstance(due, float)
            self._deliver(*due)

    def _deliver(self, target: _Target, notice: Notice) -> None:
        try:
            ok = target.send(notice)
        except Exception:
            log.exception("%s: delivery raised", target.name)
            ok = False
        with self._wake:
            self.attempts += 1
            if ok:
                if target.pending and target.pending[0] is notice:
                    target.pending.popleft()
                target.failures = 0
                target.next_try = 0.0
                self.delivered += 1
            else:
                delay = min(self.cap_s, self.initial_s * 2**target.failures)
                target.failures += 1
                target.next_try = time.monotonic() + delay
                log.warning("%s: delivery failed, retry in %.0fs", target.name, delay)
            self._wake.notify_all()
