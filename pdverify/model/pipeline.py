"""Pipeline parallelism as the PD queues meet it: what the stages of a ``--pp-size`` server agree of a request."""

from __future__ import annotations

PP_CONSENSUS: tuple[str, ...] = ("good", "bad")
"""What the stages of a pipeline-parallel server agreed of a queued request at a PP step: ``"good"`` - it is ready
(or done) on every stage; ``"bad"`` - it failed on some stage. Each queue's model says what ready and failed mean for
its step (``QueuedRequest.consensus``, ``PrefillCase.pp_consensus``, ``Transfer.consensus``)."""
