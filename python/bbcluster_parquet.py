"""BackendBench's .parquet as .jsonl for bbcluster: one JSON object per row, every column kept
(op_name, args, included_in_benchmark, why_excluded, is_synthetic, is_overhead_dominated_op,
...), in the file's row order. Python's json writes NaN for a missing float; bbcluster reads it.

    python bbcluster_parquet.py IN.parquet OUT.jsonl

OUT is written to a temporary file beside it and renamed, so a reader never sees half of it.
"""

import json
import os
import sys


def main(argv):
    if len(argv) != 3:
        print("usage: bbcluster_parquet.py IN.parquet OUT.jsonl", file=sys.stderr)
        return 2
    source, target = argv[1], argv[2]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print(f"pyarrow is not installed in {sys.executable}; scripts/setup.sh installs it, or: "
              f"{sys.executable} -m pip install pyarrow", file=sys.stderr)
        return 1
    try:
        table = pq.read_table(source)
    except Exception as e:  # pyarrow raises several kinds for a file that is not parquet
        print(f"{source}: not a readable parquet file: {e}", file=sys.stderr)
        return 1
    missing = [c for c in ("op_name", "args") if c not in table.column_names]
    if missing:
        print(f"{source}: no column {', '.join(missing)} (columns: {', '.join(table.column_names)})",
              file=sys.stderr)
        return 1
    temporary = f"{target}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        for batch in table.to_batches(max_chunksize=4096):
            for row in batch.to_pylist():
                out.write(json.dumps(row) + "\n")
    os.replace(temporary, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
