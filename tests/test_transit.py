"""Rows in transit through files (pipeline.transit): written cut by key, read back by key."""

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from microagg.pipeline import io, transit


def _rows(rng, n, width):
    return [np.arange(n, dtype=np.int64) * 3 + 7, rng.integers(0, 50, n), rng.normal(size=(n, width))]


def test_each_key_s_rows_come_back_from_every_file_in_file_order_and_in_their_own_order(tmp_path):
    rng = np.random.default_rng(5)
    n_keys, parts, written = 6, [], []
    for i, n in enumerate([1000, 0, 37, 2500]):
        arrays = _rows(rng, n, 4)
        key = rng.integers(0, n_keys, n)
        key[key == 4] = 3  # key 4 empty in every file
        parts.append((arrays, key))
        written.append(transit.write_rows(str(tmp_path / f"part-{i}"), key, n_keys, arrays + [None]))
    for k in range(n_keys):
        got = transit.read_key(written, k)
        expected = [np.concatenate([a[key == k] for a, key in ((arrays[j], key) for arrays, key in parts)])
                    for j in range(3)]
        if k == 4:
            assert got is None
            continue
        assert [g.dtype for g in got] == [np.int64, np.int64, np.float64] and got[2].shape[1] == 4
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    assert os.path.getsize(tmp_path / "part-1") == 0
    assert os.path.getsize(tmp_path / "part-0") == 1000 * (8 + 8 + 32)


def test_files_merged_into_one_give_each_key_s_rows_of_every_file_in_file_order_in_one_read(tmp_path):
    rng = np.random.default_rng(8)
    n_keys, written = 5, []
    for i, n in enumerate([300, 0, 41, 1200, 7]):
        key = rng.integers(0, n_keys, n)
        key[key == 2] = 1  # key 2 empty in every file
        written.append(transit.write_rows(str(tmp_path / f"part-{i}"), key, n_keys, _rows(rng, n, 3)))
    merged = transit.merge(str(tmp_path / "merged"), written)
    assert merged.bounds[-1] == 300 + 41 + 1200 + 7 and os.path.getsize(tmp_path / "merged") == 1548 * (8 + 8 + 24)
    for k in range(n_keys):
        got, expected = transit.read_key([merged], k), transit.read_key(written, k)
        if k == 2:
            assert got is expected is None
            continue
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(g, e)


def test_a_file_cut_short_is_an_error_not_missing_rows(tmp_path):
    rng = np.random.default_rng(1)
    arrays = _rows(rng, 100, 2)
    written = transit.write_rows(str(tmp_path / "part"), np.zeros(100, dtype=np.int64), 1, arrays)
    os.truncate(tmp_path / "part", 100 * 16 + 50)
    with pytest.raises(EOFError, match="bytes missing"):
        transit.read_key([written], 0)


def test_the_scratch_directory_goes_on_exit_and_one_left_by_a_job_that_no_longer_runs_goes_with_the_next(
        tmp_path, monkeypatch):
    import dask

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    left = tmp_path / f"{transit.PREFIX}{int(dead.stdout)}-abc"  # a killed job's
    running = tmp_path / f"{transit.PREFIX}{os.getppid()}-def"  # a job that still runs
    other = tmp_path / "microagg-other"
    reused = tmp_path / f"{transit.PREFIX}{os.getpid()}-ghi"  # a killed job's pid, now this process's
    for d in (left, running, other, reused):
        d.mkdir()
        (d / "part").write_bytes(b"x")
    os.utime(reused, (0, 0))  # last changed long before this process started
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        transit.clean()  # as every job does when it starts its blocks stage
        assert not left.exists() and not reused.exists() and running.exists() and other.exists()
        with transit.scratch(1000) as path:
            assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith(
                f"{transit.PREFIX}{socket.gethostname()}-{os.getpid()}-")
            with open(os.path.join(path, "part"), "wb") as f:
                f.write(b"rows")
        assert not os.path.exists(path)
        monkeypatch.setattr(transit, "ROOM", 10**30)  # no room on the disk: the rows stay in memory
        with transit.scratch(1000) as path:
            assert path is None
    assert running.exists() and other.exists()


def test_a_scratch_directory_of_another_host_goes_only_once_its_lease_is_an_hour_old(tmp_path):
    """A scratch root that hosts share (Dask's temporary-directory on NFS, for workers on several hosts): another
    host's job cannot be checked by its pid, which means nothing here, so its directory stays while its lease is
    refreshed and goes once the lease is older than io.LEASE_EXPIRY by the filesystem's clock. This host's
    directories are still judged by their pid, whichever host the name gives."""
    import dask

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    gone = int(dead.stdout)  # no such process here
    host = socket.gethostname()
    live = tmp_path / f"{transit.PREFIX}other-host-7-{gone}-abc"  # another host's job, its lease fresh
    expired = tmp_path / f"{transit.PREFIX}other-host-7-{os.getpid()}-def"  # another host's, its lease stale
    mine_dead = tmp_path / f"{transit.PREFIX}{host}-{gone}-ghi"  # this host's killed job
    mine_running = tmp_path / f"{transit.PREFIX}{host}-{os.getppid()}-jkl"
    for d in (live, expired, mine_dead, mine_running):
        d.mkdir()
        (d / io.LEASE).write_text(f"{host} 1 0.0\n")
    (tmp_path / "clock").write_bytes(b"")
    now = (tmp_path / "clock").stat().st_mtime  # the filesystem's clock
    (tmp_path / "clock").unlink()
    os.utime(live / io.LEASE, (now - io.LEASE_EXPIRY + 60, now - io.LEASE_EXPIRY + 60))
    os.utime(expired / io.LEASE, (now - io.LEASE_EXPIRY - 60, now - io.LEASE_EXPIRY - 60))
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        transit.clean()
    assert live.exists() and mine_running.exists()
    assert not expired.exists() and not mine_dead.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".microagg-clock-")] == []  # the clock's probe


def test_a_running_job_s_scratch_directory_holds_its_refreshed_lease_which_its_own_cleanups_keep(tmp_path,
                                                                                               monkeypatch):
    import dask

    monkeypatch.setattr(io, "LEASE_REFRESH", 0.05)
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        with transit.scratch(1000) as path:
            lease = os.path.join(path, io.LEASE)
            assert open(lease).read().split()[:2] == [socket.gethostname(), str(os.getpid())]
            os.utime(lease, (0, 0))
            deadline = time.monotonic() + 30
            while os.stat(lease).st_mtime == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert os.stat(lease).st_mtime > 0  # refreshed while the job runs
            open(os.path.join(path, "rows-0"), "wb").close()
            open(os.path.join(path, "released-0"), "wb").close()
            transit.remove_files(path, keep="released")
            assert sorted(os.listdir(path)) == sorted([io.LEASE, "released-0"])
        assert not os.path.exists(path)


def test_a_scratch_root_not_made_yet_is_made(tmp_path):
    """A deployment names the scratch root on a new volume (deploy/kubernetes: /data/scratch): the job makes it
    rather than keeping the rows in memory for want of a directory."""
    import dask

    root = tmp_path / "volume" / "scratch"
    with dask.config.set({"temporary-directory": str(root)}):
        with transit.scratch(1000) as path:
            assert path is not None and os.path.dirname(path) == str(root)


def test_the_scratch_directory_goes_when_the_stage_fails(tmp_path):
    import dask

    with dask.config.set({"temporary-directory": str(tmp_path)}):
        with pytest.raises(RuntimeError, match="a task failed"):
            with transit.scratch(10) as path:
                open(os.path.join(path, "part"), "wb").close()
                raise RuntimeError("a task failed")
    assert os.listdir(tmp_path) == []


def test_only_the_files_whose_name_holds_the_mark_are_kept(tmp_path):
    for name in ("blocks-1-0", "blocks-1-upper-3", "blocks-1-released-ab", "blocks-2-released-cd"):
        (tmp_path / name).write_bytes(b"rows")
    transit.remove_files(str(tmp_path), keep="-released-")
    assert sorted(os.listdir(tmp_path)) == ["blocks-1-released-ab", "blocks-2-released-cd"]


def test_stored_arrays_and_columns_read_back_as_written(tmp_path):
    """store / load: arrays of any shapes and dtypes (an empty one among them) in one file; store_columns /
    read_columns: the columns of several matrices, any of them read alone."""
    import numpy as np

    from microagg.pipeline import transit

    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(7, 3)), np.arange(5, dtype=np.int64), np.zeros((0, 4)), rng.random(9) < 0.5,
              rng.integers(0, 2**63, size=4, dtype=np.uint64)]
    for got, want in zip(transit.load(transit.store(tmp_path / "arrays", arrays)), arrays):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    X, Xm = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    transit.store_columns(tmp_path / "columns", [X, Xm])
    np.testing.assert_array_equal(transit.read_columns(tmp_path / "columns", 6, [4, 0]), np.stack([Xm[:, 1], X[:, 0]]))
    np.testing.assert_array_equal(transit.read_columns(tmp_path / "columns", 6, range(6)), np.hstack([X, Xm]).T)



def test_a_file_written_again_leaves_a_reader_of_the_first_its_whole_bytes(tmp_path, monkeypatch):
    """A task that Dask runs again (its worker process killed) rewrites its file while another worker may be
    reading the first one's: the new file replaces it only once complete, so the reader, whose open file is the
    first, reads it whole; a write that fails leaves the first file as it was and no part of its own."""
    rng = np.random.default_rng(2)
    arrays = _rows(rng, 300, 3)
    key = rng.integers(0, 4, 300)
    path = str(tmp_path / "routed-0")
    written = transit.write_rows(path, key, 4, arrays)
    with open(path, "rb") as reader:
        again = transit.write_rows(path, key, 4, arrays)  # the same task, run again
        first = reader.read()
    assert again.path == written.path and (again.bounds == written.bounds).all() and again.offsets == written.offsets
    assert len(first) == 300 * (8 + 8 + 24)
    with open(path, "rb") as f:
        assert f.read() == first
    with monkeypatch.context() as patched, pytest.raises(ZeroDivisionError):
        patched.setattr(transit, "_bytes", lambda array: 1 / 0)
        transit.write_rows(path, key, 4, arrays)
    assert os.listdir(tmp_path) == ["routed-0"]
    with open(path, "rb") as f:
        assert f.read() == first
    for k in range(4):
        got = transit.read_key([written], k)
        np.testing.assert_array_equal(got[2], arrays[2][key == k])
