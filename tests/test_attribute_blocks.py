"""Attribute blocks (--blocks "A,B;C,D"): each block microaggregated on its own, k-anonymous per block,
with the real anonymity k' of the whole record and of every pair / triple of blocks."""

import json

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

import microagg
from conftest import CENSUS_CSV, assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, extract

CENSUS = pd.read_csv(CENSUS_CSV)
BLOCKS = [list(CENSUS.columns[:4]), list(CENSUS.columns[4:8]), list(CENSUS.columns[8:])]


def _k_prime(released, columns):
    return len(released) / len(released[columns].drop_duplicates())


def test_blocks_in_memory_equal_distributed_and_are_k_anonymous_per_block():
    in_memory = microagg.anonymize(CENSUS, 3, attribute_blocks=BLOCKS)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(CENSUS, npartitions=3), 3, attribute_blocks=BLOCKS).compute()
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory)
    for block in BLOCKS:
        assert_k_anonymous(in_memory, block, 3)
        # each block alone is exactly the method on that block's columns
        alone = microagg.anonymize(CENSUS[block], 3)
        pd.testing.assert_frame_equal(in_memory[block], alone)
    assert _k_prime(in_memory, list(CENSUS.columns)) < 3  # not k-anonymous over all QIs: the price of blocks


def test_cli_blocks_report_real_anonymity(tmp_path):
    spec = ";".join(",".join(b) for b in BLOCKS)
    outs = []
    for name, extra in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = tmp_path / name
        microagg_cli("anonymize", "--no-html", CENSUS_CSV, out, "--k", 3, "--blocks", spec, *extra, check=True)
        outs.append(out)
    assert (outs[0] / "part-00000.parquet").read_bytes() == (outs[1] / "part-00000.parquet").read_bytes()
    report = json.loads((outs[0] / "_report.json").read_text())
    released = pd.read_parquet(outs[0])
    assert report["k_anonymity_scope"] == "each attribute block"
    blocks = report["attribute_blocks"]
    assert [b["columns"] for b in blocks["blocks"]] == BLOCKS
    assert all(b["min_group_size"] >= 3 for b in blocks["blocks"])
    k_prime = blocks["real_anonymity"]
    assert set(k_prime) == {"1+2", "1+3", "2+3", "all"}
    assert k_prime["all"] == pytest.approx(_k_prime(released, list(CENSUS.columns)))
    assert k_prime["1+3"] == pytest.approx(_k_prime(released, BLOCKS[0] + BLOCKS[2]))
    assert k_prime["all"] <= min(k_prime["1+2"], k_prime["1+3"], k_prime["2+3"])
    # the IL adds up over the blocks (SSE and SST both split by column)
    sizes = [len(b) for b in BLOCKS]
    weighted = sum(b["information_loss"] * n for b, n in zip(blocks["blocks"], sizes)) / sum(sizes)
    assert report["information_loss"] == pytest.approx(weighted)


@pytest.mark.parametrize("flags, message", [
    (["--blocks", "q0,q1;nope"], "--blocks names 1 column(s) not in the input: 'nope'"),
    (["--blocks", "q0,q1;q1,q2"], "--blocks puts column(s) 'q1' in more than one block"),
    (["--blocks", "q0,q1;;q2"], "--blocks has an empty attribute block"),
    (["--blocks", "q0,q1;q2", "--release-where", "q0 > 0"], "cannot be combined with --blocks"),
])
def test_bad_blocks_fail_before_anything_is_written(tmp_path, flags, message):
    assert_refused(tmp_path, extract(300, seed=2), QI[:3], 3, flags, message)
