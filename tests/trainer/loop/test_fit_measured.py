"""The memory prediction against reality on CPU: one torchrun of two gloo ranks trains five cases (every
model shape and every sharding of ``benchmarks/bench_fit.py``'s matrix, one shape under two shardings) for
two steps each with the trainer's own parts (``benchmarks/fit_worker.py``), and every rank's measured peak
is within 25% of what the trainer predicted for that run. The benchmark runs the whole matrix (twelve cases)
through the same functions; BENCHMARKS.md keeps its table. Why the ranks' memory can be measured on CPU at
all: the benchmark's docstring."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.trainer.run import ROOT, trainer_env

pytestmark = pytest.mark.slow

# Every shape once and every sharding at least once; ``large-blocks`` twice, where sharding saves the most.
CASES = [("root-only", "full_shard"), ("grouped-units", "shard_grad_op"), ("tied-vocab", "no_shard"),
         ("large-blocks", "full_shard"), ("large-blocks", "no_shard")]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fit", ROOT / "benchmarks/bench_fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_rank_peaks_within_a_quarter_of_its_prediction(tmp_path, tiny_model_dir):
    bench = _bench()
    assert {name for name, _ in CASES} == set(bench.SHAPES) and {s for _, s in CASES} == set(bench.STRATEGIES)
    results, failed = bench.measure(tmp_path, CASES, tiny_model_dir, trainer_env(tmp_path))
    assert not failed, failed
    assert [(r["name"], r["sharding"]) for r in results] == CASES
    rows = bench.table(results)
    print(bench.show(rows))
    off = [row for row in rows if abs(row[4]) > bench.TOLERANCE]
    assert not off, off
    measured = {(name, sharding): mib for name, sharding, _, mib, _ in rows}
    assert measured["large-blocks", "full_shard"] < measured["large-blocks", "no_shard"]  # sharding shows
