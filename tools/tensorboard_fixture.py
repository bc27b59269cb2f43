#!/usr/bin/env python3
"""Writes tests/io/fixtures/tensorboard_reference.tfevents with TensorBoard's own writer: its
Event and Summary protobufs (tensorboard.compat.proto) framed by its RecordWriter (TFRecord,
masked CRC32C). tests/io/tensorboard_events_test.cpp checks that anvil writes these exact
bytes for the same events and reads them back.

Needs the tensorboard package (PyPI), for instance in a venv:
    python3 -m venv /tmp/tb && /tmp/tb/bin/pip install tensorboard
    /tmp/tb/bin/python tools/tensorboard_fixture.py
The output is deterministic: fixed wall times, steps and values.
"""
import io
import pathlib

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "io" / "fixtures"

# (wall_time, step, [(tag, simple_value)]); kept in step with the C++ test's list.
EVENTS = [
    (1700000001.5, 7, [("train/loss", 2.5), ("train/lr", 0.001), ("train/zero", 0.0)]),
    (1700000002.25, 123456789012, [("eval/mmlu_acc", 0.3125), ("memory/activations", -1.75),
                                   ("train/big", 3e38)]),
    (1700000003.0, 8, []),
]


def main():
    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    writer.write(event_pb2.Event(wall_time=1700000000.0, file_version="brain.Event:2")
                 .SerializeToString())
    for wall_time, step, values in EVENTS:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values])
        writer.write(event_pb2.Event(wall_time=wall_time, step=step, summary=summary)
                     .SerializeToString())
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tensorboard_reference.tfevents").write_bytes(buffer.getvalue())


if __name__ == "__main__":
    main()
