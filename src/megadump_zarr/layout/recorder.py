"""The flight recorder's window vocabulary: what a window committed by a trigger says about it.

A window the recorder commits is an ordinary window (every reader, ``compare``, ``root_cause`` and the report
read it unchanged) whose attributes add:

* ``recorderTrigger``: what fired (:data:`TRIGGER_FIELDS`, one mapping);
* ``recorderPart``: :data:`PART_TRIGGER` (the ring's steps and the triggering step) or :data:`PART_AFTER`
  (the steps recorded after the trigger);
* ``recorderSteps``: the user steps the window holds, in order;
* ``recorderReplicas``: name patterns of the records that should be identical across ranks (when set).
"""

from __future__ import annotations

__all__ = [
    "KIND_NONFINITE",
    "KIND_NORM",
    "KIND_PREDICATE",
    "PART_AFTER",
    "PART_TRIGGER",
    "RECORDER_PART",
    "RECORDER_REPLICAS",
    "RECORDER_STEPS",
    "RECORDER_TRIGGER",
    "TRIGGER_FIELDS",
    "TRIGGER_KINDS",
]

RECORDER_TRIGGER = "recorderTrigger"
"""Window attribute: the mapping that says what fired (keys :data:`TRIGGER_FIELDS`)."""
RECORDER_PART = "recorderPart"
"""Window attribute: which part of a trigger's record the window holds (:data:`PART_TRIGGER`, :data:`PART_AFTER`)."""
RECORDER_STEPS = "recorderSteps"
"""Window attribute: the user steps the window holds, ascending."""
RECORDER_REPLICAS = "recorderReplicas"
"""Window attribute: shell-style name patterns of records that should be identical across ranks."""

PART_TRIGGER = "trigger"
"""The ring's steps before the trigger and the triggering step."""
PART_AFTER = "after"
"""The steps recorded after the trigger."""

KIND_NONFINITE = "nonfinite"
"""A record holds NaN or Inf where the same record was finite before (or is seen for the first time)."""
KIND_NORM = "norm"
"""A record's L2 norm is outside ``k`` times the robust spread around the median of its recent norms."""
KIND_PREDICATE = "predicate"
"""The user's predicate over a statistics row returned true."""
TRIGGER_KINDS = (KIND_NONFINITE, KIND_NORM, KIND_PREDICATE)

TRIGGER_FIELDS = (
    "kind",
    "step",
    "rank",
    "kernel",
    "direction",
    "stage",
    "task",
    "owner",
    "coreType",
    "coreId",
    "core",
    "record",
    "io",
    "index",
    "value",
    "threshold",
)
"""Keys of ``recorderTrigger``: the trigger kind; where it fired (rank, user step, kernel, direction, L1
stage, task id, owner id, core type and id, ``core`` as ``{coreType}{coreId}``, the record's tensor name,
port direction and index; None where the record has none, e.g. at L0); the value that fired (the L2 norm,
the NaN + Inf count, or None for a predicate) and the threshold it crossed (None where there is none)."""
