"""The interconnect test's and the burn-in's node side (``trainer/nettest``), pure: the pairs and message
sizes it runs, how many collectives a message goes as, a decoder block's size from a model's config, and
nvidia-smi and kernel-log text read in the tools' own formats (tests/data/nvidia_smi: written in the layout
nvidia-smi prints, not recorded on this machine: it has no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.nettest.node import parse_nvlink, parse_smi_health, parse_xid, ring_pairs, sizes_for

MIB = 1 << 20
DATA = Path(__file__).resolve().parents[2] / "data" / "nvidia_smi"


@pytest.mark.parametrize(("nnodes", "rounds", "count"), [(1, 0, 0), (2, 1, 1), (3, 3, 3), (4, 2, 4), (5, 3, 5),
                                                         (16, 2, 16)])
def test_ring_pairs_take_at_most_three_rounds_and_no_node_twice_per_round(nnodes, rounds, count):
    pairs = ring_pairs(nnodes)
    assert len(pairs) == count and len({r for r, _a, _b in pairs}) == rounds
    for rnd in {r for r, _a, _b in pairs}:
        members = [n for r, a, b in pairs if r == rnd for n in (a, b)]
        assert len(members) == len(set(members))
    assert {n for _r, a, b in pairs for n in (a, b)} == (set(range(nnodes)) if nnodes > 1 else set())


@pytest.mark.parametrize(("max_bytes", "quick", "sizes"), [
    (256 * MIB, False, [1, 4, 16, 64, 256]), (64 * MIB, True, [1, 16, 64]), (MIB // 2, False, [1]),
    (24 * MIB, False, [1, 4, 16, 24]),
])
def test_sizes_run_from_one_mib_to_the_largest(max_bytes, quick, sizes):
    assert sizes_for(max_bytes, quick) == [s * MIB for s in sizes]


@pytest.mark.parametrize(("config", "block", "total"), [
    # Llama-3.1-8B: 32 blocks of 218,112,000 parameters, untied 128,256 x 4096 embeddings: 8.03 B
    ({"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
      "num_hidden_layers": 32, "vocab_size": 128256, "tie_word_embeddings": False}, 218_112_000, 8_030_261_248),
    ({"hidden_size": 64, "num_hidden_layers": 2}, 64 * 64 * 4 + 3 * 64 * 256 + 128, None),
    ({"hidden_size": 64}, None, None),
])
def test_a_decoder_blocks_parameters_from_its_config(config, block, total):
    from trainer.nettest.model import block_params

    got = block_params(config)
    if block is None:
        assert got is None
    else:
        assert got[0] == block and (total is None or got[1] == total)


def test_the_node_reads_the_model_shape_where_its_config_is_there(tmp_path):
    import json

    from trainer.nettest.model import model_shape

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    params = tmp_path / "parameters.yaml"
    params.write_text(f"model_name: {tmp_path / 'm'}\n")
    assert model_shape(str(params))["block_params"] == 64 * 64 * 4 + 3 * 64 * 256 + 128
    params.write_text("model_name: builtin:tiny-llama\n")
    assert model_shape(str(params)) is None and model_shape(str(tmp_path / "none.yaml")) is None


@pytest.mark.parametrize(("nbytes", "backend", "pieces"), [
    (MIB, "gloo", 1), (4 * MIB, "gloo", 1), (8 * MIB, "gloo", 2), (16 * MIB, "gloo", 4), (64 * MIB, "gloo", 8),
    (256 * MIB, "gloo", 8), (256 * MIB, "nccl", 1),
])
def test_gloo_messages_go_as_several_collectives_at_once_nccl_as_one(nbytes, backend, pieces):
    from trainer.nettest.node import pieces_for

    assert pieces_for(nbytes, backend) == pieces


def test_a100_counters_per_gpu():
    gpus = parse_smi_health((DATA / "a100_pending_remap.txt").read_text())
    assert [g["bus_id"] for g in gpus] == ["00000000:10:1C.0", "00000000:10:1D.0"]
    first, second = gpus
    assert (first["ecc_volatile_uncorrectable"], first["remapped_correctable"], first["remap_pending"],
            first["remap_failure"], first["retired_pending"]) == (0, 1, True, False, None)
    assert (second["ecc_volatile_uncorrectable"], second["ecc_aggregate_uncorrectable"],
            second["remapped_uncorrectable"], second["remap_failure"]) == (3, 5, 2, True)


def test_older_cards_double_bit_totals_and_pending_retirement():
    (gpu,) = parse_smi_health((DATA / "v100_double_bit.txt").read_text())
    assert (gpu["ecc_volatile_uncorrectable"], gpu["ecc_aggregate_uncorrectable"], gpu["retired_pending"],
            gpu["remap_pending"]) == (2, 2, True, None)


def test_nvlink_and_xid_lines():
    links = parse_nvlink((DATA / "nvlink_one_inactive.txt").read_text())
    assert links == {"GPU 0: NVIDIA H100 80GB HBM3": {"up": 2, "inactive": 1},
                     "GPU 1: NVIDIA H100 80GB HBM3": {"up": 3, "inactive": 0}}
    xids = parse_xid((DATA / "dmesg_xid.txt").read_text())
    assert len(xids) == 1 and ": 79, " in xids[0]
    assert parse_smi_health("") == [] and parse_nvlink("") == {} and parse_xid("") == []
