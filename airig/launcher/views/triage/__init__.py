"""`triage`: what is wrong with the running kit, and the evidence.

collectors (``collect.py``: containers, logs, probes, brain, `models verify`) → pure
classifiers (``classify.py``: facts → findings, one per class of the compute runbook;
``backend.py``: which backend each compute container got) → renderer (``render.py``: text
or JSON).
"""

from __future__ import annotations

from airig.launcher.views.triage.classify import classify
from airig.launcher.views.triage.facts import ContainerFacts, Facts, Finding, Healthcheck

__all__ = ["ContainerFacts", "Facts", "Finding", "Healthcheck", "classify"]
