"""A rank's read of the token cache at its start: the trainer's way (``trainer.data.encode.Encoded.load``,
each Arrow column a numpy view of its buffer) beside pyarrow's ``to_numpy`` (the way before, which imports
pandas where it is installed), each in a fresh process that has imported what a rank has by then (torch,
transformers, pyarrow), alternating, the median of ``--repeat`` runs each: the CPU seconds of the read and
the process's resident peak after it.

    .venv/bin/python benchmarks/bench_cache_read.py [--rows 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READ = """import json, resource, sys, time
sys.path.insert(0, {root!r})
import numpy as np, pyarrow as pa, torch, transformers.modeling_utils  # what a rank holds before its data
from trainer.data.encode import Encoded
folder, way = sys.argv[1], sys.argv[2]
start = time.process_time()
if way == "view":
    encoded = Encoded.load(__import__("pathlib").Path(folder), ["part-0.arrow"])
    rows = len(encoded)
else:
    table = pa.ipc.open_stream(pa.memory_map(folder + "/part-0.arrow")).read_all()
    ids = [c.values.to_numpy(zero_copy_only=True) for c in table.column("input_ids").chunks]
    learned = [c.values.to_numpy(zero_copy_only=True) for c in table.column("learned").chunks]
    offsets = [c.offsets.to_numpy(zero_copy_only=True) for c in table.column("input_ids").chunks]
    rows = len(table.column("lost").to_numpy())  # ids, learned and offsets held as the reader holds them
print(json.dumps({{"cpu_s": time.process_time() - start, "rows": rows, "pandas": "pandas" in sys.modules,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def _write(folder: Path, rows: int) -> None:
    """One Arrow stream file as the cache writes it: token ids, learned masks, tokens cut, learned counts."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    lengths = rng.integers(16, 256, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = rng.integers(0, 32000, int(offsets[-1]), dtype=np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
                      "learned": pa.ListArray.from_arrays(pa.array(offsets), pa.array((ids % 2).astype(np.uint8))),
                      "lost": pa.array(np.zeros(rows, np.int32)), "learned_count": pa.array(lengths.astype(np.int32))})
    with pa.OSFile(str(folder / "part-0.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _write(Path(tmp), args.rows)
        got: dict[str, list[dict]] = {"view": [], "to_numpy": []}
        for _ in range(args.repeat):
            for way in got:
                out = subprocess.run([sys.executable, "-c", READ.format(root=str(ROOT)), tmp, way], cwd=ROOT,
                                     capture_output=True, text=True, check=True)
                got[way].append(json.loads(out.stdout.splitlines()[-1]))
    print(f"{args.rows:,} examples, the median of {args.repeat} fresh processes each")
    print(f"{'way':<10} {'CPU s':>7} {'peak MiB':>9}  pandas imported")
    med = {}
    for way, runs in got.items():
        med[way] = (statistics.median(r["cpu_s"] for r in runs), statistics.median(r["peak_mib"] for r in runs))
        print(f"{way:<10} {med[way][0]:7.3f} {med[way][1]:9.0f}  {runs[0]['pandas']}")
    print(f"view / to_numpy: CPU {med['view'][0] / med['to_numpy'][0]:.2f}x, "
          f"peak {med['view'][1] / med['to_numpy'][1]:.2f}x ({med['to_numpy'][1] - med['view'][1]:.0f} MiB less)")


if __name__ == "__main__":
    main()
