"""Failures end every rank with an error naming who failed, never a hang: a rank killed in the
middle of training (SIGKILL, 3 ranks, p3), a killed rank the others shrink away from
(gs.shrink, 4 ranks), Ctrl-C (SIGINT) on one rank and on every rank. Each
job's waits are bounded by GRADSYNC_TIMEOUT=20s (conftest.JOB_TIMEOUT); a lost connection is
noticed at once, so the jobs end in seconds; every process is reaped (no zombie left)."""

import signal

import torch

from conftest import live_processes


def test_a_killed_rank_is_named_by_every_other_rank(job):
    result = job(3, "killed", "1", "5", timeout=60)
    assert result.codes[1] == -signal.SIGKILL
    for rank in (0, 2):
        error = result.results[rank]
        assert error is not None and "error" in error, result.outputs[rank]
        assert error["error"] == "PeerLostError", error
        assert "rank 1" in error["message"], error["message"]
        assert error["origin"] == 1, error  # whether it saw the loss or heard of it from a peer
        assert result.codes[rank] == 1
        # Within the timeout: the lost connection is seen at once, not after 20 s.
        assert error["seconds_after_start"] < 20, error
    assert result.seconds < 25
    assert live_processes(str(result.directory)) == []


def test_survivors_shrink_to_a_job_of_their_own_and_train_on(job):
    result = job(4, "shrunk", "2", "3", timeout=90)
    assert result.codes[2] == -signal.SIGKILL
    survivors = [result.results[rank] for rank in (0, 1, 3)]
    for rank, out in zip((0, 1, 3), survivors):
        assert out is not None and "value" in out, result.outputs[rank]
        value = out["value"]
        assert "rank 2" in value["lost"], value["lost"]
        assert (value["old_rank"], value["size"]) == (rank, 3), value
    assert [out["value"]["rank"] for out in survivors] == [0, 1, 2]
    first = survivors[0]["value"]["parameters"]
    for out in survivors[1:]:
        for a, b in zip(first, out["value"]["parameters"]):
            assert torch.equal(a, b)
    assert live_processes(str(result.directory)) == []


def test_ctrl_c_on_one_rank_stops_it_and_names_it_to_the_others(job):
    result = job(2, "interrupted", signals={1: signal.SIGINT}, timeout=60)
    assert result.results[1]["error"] == "KeyboardInterrupt", result.outputs[1]
    error = result.results[0]
    assert error["error"] == "PeerLostError", error
    assert "rank 1" in error["message"] and "interrupted" in error["message"], error["message"]
    assert live_processes(str(result.directory)) == []


def test_ctrl_c_on_every_rank_stops_them_all(job):
    result = job(3, "interrupted", signals={0: signal.SIGINT, 1: signal.SIGINT, 2: signal.SIGINT},
                 timeout=60)
    for rank in range(3):
        error = result.results[rank]
        assert error is not None, result.outputs[rank]
        # Its own Ctrl-C, or a peer's abort that arrived first (naming the interrupted rank).
        assert error["error"] == "KeyboardInterrupt" or (
            error["error"] == "PeerLostError" and "interrupted" in error["message"]), error
    assert sum(r["error"] == "KeyboardInterrupt" for r in result.results) >= 1
    assert live_processes(str(result.directory)) == []
