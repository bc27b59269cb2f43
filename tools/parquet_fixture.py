#!/usr/bin/env python3
"""Writes the records of a JSON Lines file as a Parquet file, the layout Hugging Face datasets
ship, for the Parquet tests of `anvil prepare` (tests/data/prepare_parts_test.cpp).

  parquet_fixture.py IN.jsonl OUT.parquet [--row-group-rows N] [--compression C]
                     [--large-string] [--null-row K] [--extra-column]

Every field of the records becomes a column; --null-row K sets the text of row K to null,
--extra-column adds an integer column "id" before the others. Needs pyarrow.
"""
import argparse
import json

import pyarrow as pa
import pyarrow.parquet as pq


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--row-group-rows", type=int, default=1 << 20)
    parser.add_argument("--compression", default="snappy")
    parser.add_argument("--large-string", action="store_true")
    parser.add_argument("--null-row", type=int, default=-1)
    parser.add_argument("--extra-column", action="store_true")
    parser.add_argument("--text-field", default="text")
    args = parser.parse_args()

    with open(args.input, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    texts = [r[args.text_field] for r in records]
    if 0 <= args.null_row < len(texts):
        texts[args.null_row] = None
    string_type = pa.large_string() if args.large_string else pa.string()
    columns = {}
    if args.extra_column:
        columns["id"] = pa.array(range(len(texts)), type=pa.int64())
    columns[args.text_field] = pa.array(texts, type=string_type)
    pq.write_table(pa.table(columns), args.output, row_group_size=args.row_group_rows,
                   compression=args.compression)


if __name__ == "__main__":
    main()
