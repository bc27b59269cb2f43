#!/usr/bin/env python3
"""Checks a run directory's TensorBoard event file with TensorBoard's own readers against its
metrics.jsonl: every number of every record (a number f of a train/eval record as the tag
"train/f" / "eval/f", a number k of an object field g as "g/k"; null left out) is a scalar at
the record's step whose simple_value equals numpy.float32 of the number, exactly; no other
scalar is there and no (tag, step) appears twice. Exits 1 naming the first difference.

Usage: check_tensorboard.py RUN_DIR   (needs the tensorboard and numpy packages)
"""
import json
import pathlib
import sys

import numpy
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.util import tensor_util


def expected_scalars(metrics_path):
    """Returns {(tag, step): value} for every number of metrics.jsonl."""

    def flatten(tag, value, step, out):
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return
        if isinstance(value, dict):
            for key, member in value.items():
                flatten(f"{tag}/{key}", member, step, out)
            return
        key = (tag, step)
        if key in out:
            sys.exit(f"metrics.jsonl holds {tag} at step {step} twice")
        out[key] = value

    out = {}
    for line in metrics_path.read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key in ("type", "step"):
                continue
            flatten(key if isinstance(value, dict) else f"{record['type']}/{key}", value,
                    record["step"], out)
    return out


def main():
    run = pathlib.Path(sys.argv[1])
    expected = expected_scalars(run / "metrics.jsonl")
    files = sorted(run.glob("events.out.tfevents.*"))
    if len(files) != 1:
        sys.exit(f"expected one event file in {run}, found {len(files)}")

    # The raw events, as TensorBoard's loader reads them (CRCs checked).
    path = str(files[0])
    events = list(event_file_loader.LegacyEventFileLoader(path).Load())
    if events[0].file_version != "brain.Event:2":
        sys.exit(f"first event has file_version {events[0].file_version!r}")
    seen = {}
    for event in events[1:]:
        for value in event.summary.value:
            if value.WhichOneof("value") != "simple_value":
                sys.exit(f"{value.tag} at step {event.step} is not a simple_value")
            key = (value.tag, event.step)
            if key in seen:
                sys.exit(f"{value.tag} at step {event.step} appears twice in {files[0].name}")
            seen[key] = value.simple_value
    for key, value in expected.items():
        if key not in seen:
            sys.exit(f"{key[0]} at step {key[1]} is in metrics.jsonl but not in the event file")
        if seen[key] != numpy.float32(value):
            sys.exit(f"{key[0]} at step {key[1]}: event {seen[key]!r}, metrics.jsonl {value!r}")
    extra = sorted(set(seen) - set(expected))
    if extra:
        sys.exit(f"the event file holds scalars metrics.jsonl has not: {extra[:5]}")

    # The same events as TensorBoard's current backend sees them: migrated to scalar tensors
    # of the scalars plugin.
    migrated = 0
    for event in event_file_loader.EventFileLoader(path).Load():
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name != "scalars":
                sys.exit(f"{value.tag} at step {event.step} is not migrated to a scalar")
            if tensor_util.make_ndarray(value.tensor).item() != seen[(value.tag, event.step)]:
                sys.exit(f"{value.tag} at step {event.step} changes in the migration")
            migrated += 1
    if migrated != len(seen):
        sys.exit(f"{migrated} scalars after TensorBoard's migration, {len(seen)} before")

    # What TensorBoard's scalar dashboard would show, series by series.
    accumulator = event_accumulator.EventAccumulator(str(run), size_guidance={
        event_accumulator.SCALARS: 0})
    accumulator.Reload()
    tags = sorted({tag for tag, _ in expected})
    if sorted(accumulator.Tags()["scalars"]) != tags:
        sys.exit(f"EventAccumulator tags {sorted(accumulator.Tags()['scalars'])} != {tags}")
    for tag in tags:
        shown = [(s.step, s.value) for s in accumulator.Scalars(tag)]
        wanted = sorted((step, float(numpy.float32(value)))
                        for (t, step), value in expected.items() if t == tag)
        if shown != wanted:
            sys.exit(f"EventAccumulator {tag}: {shown[:4]}... != {wanted[:4]}...")
    print(f"ok: {len(expected)} scalars in {len(tags)} tags equal metrics.jsonl")


if __name__ == "__main__":
    main()
