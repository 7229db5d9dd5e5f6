"""A bucket's answers in words, table-driven: where the write check writes, and which failures are the
bucket's (said in one line) and which are not (a bug stays one)."""

from __future__ import annotations

import pytest

from launcher.runs.core.bucket import BucketError, _answers, check_root, storage_words


@pytest.mark.parametrize(("output_dir", "run_id", "root"), [
    ("s3://ckpts/runs/$FSDP_TUI_RUN_ID", "20261202-0101-x-ab12", "s3://ckpts/runs/20261202-0101-x-ab12"),
    ("s3://ckpts/runs/$FSDP_TUI_RUN_ID", None, "s3://ckpts/runs"),  # the doctor: no run yet
    ("s3://ckpts/runs/${FSDP_TUI_RUN_ID}/out/", None, "s3://ckpts/runs"),
    ("s3://ckpts/team/$USER/run", "r1", "s3://ckpts/team"),  # a variable only the node knows
    ("gs://b/fixed/", "r1", "gs://b/fixed"),
])
def test_the_write_check_writes_where_the_runs_checkpoints_go(output_dir, run_id, root):
    assert check_root(output_dir, run_id) == root


def test_a_buckets_failures_are_one_line_and_a_bug_is_not_hidden():
    from botocore.exceptions import ClientError, EndpointConnectionError

    dead = EndpointConnectionError(endpoint_url="http://127.0.0.1:9/ckpts")
    assert storage_words(dead) == ("the bucket's endpoint does not answer (Could not connect to the endpoint URL: "
                                   '"http://127.0.0.1:9/ckpts")')
    refused = ClientError({"Error": {"Code": "InvalidAccessKeyId", "Message": "The AWS Access Key Id you provided "
                                     "does not exist\nin our records."}}, "ListObjectsV2")
    assert "\n" not in storage_words(refused) and "does not exist in our records" in storage_words(refused)
    assert storage_words(PermissionError("Forbidden")) == "Forbidden"
    assert storage_words(KeyError("name")) is None
    with pytest.raises(BucketError, match=r"^s3://b/x: the bucket's endpoint does not answer"), _answers("s3://b/x"):
        raise dead
    with pytest.raises(KeyError), _answers("s3://b/x"):  # a bug in our code is not a bucket's answer
        raise KeyError("name")
