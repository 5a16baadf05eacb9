"""deploy/Dockerfile built and run: the demo in the image as a non-root user with the warm Numba cache,
and a job file run by `microagg run` in a container against a Dask cluster of containers (a scheduler
and two workers on a Docker network, the data on a volume they share).

Slow (`make bench`, not CI) and skipped where no Docker daemon answers. The base image is
python:3.11-slim unless ``MICROAGG_BASE_IMAGE`` names another (a registry mirror, or the image of
deploy/debian_base.sh on a host without Docker Hub). Built as deploy/README.md says: from the
repository root, whose .dockerignore keeps the context to the sources.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, assert_k_anonymous

DEPLOY = ROOT / "deploy"
BASE_IMAGE = os.environ.get("MICROAGG_BASE_IMAGE", "python:3.11-slim")
QI = ["AGE", "WAGE", "EARNINGS", "AGI", "TAXINC", "TAX", "FICA"]

pytestmark = pytest.mark.slow


def docker(*args, timeout=120, check=True):
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"docker {' '.join(args)}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def image():
    if shutil.which("docker") is None or docker("info", check=False).returncode:
        pytest.skip("no Docker daemon")
    tag = f"microagg-test:{uuid.uuid4().hex[:12]}"
    docker("build", "--network", "host", "-f", str(DEPLOY / "Dockerfile"), "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
           "-t", tag, str(ROOT), timeout=1800)
    yield tag
    docker("image", "rm", "-f", tag, check=False)


def test_the_demo_runs_in_the_image_as_any_user_on_the_warm_cache(image):
    """The image's own user and an arbitrary UID of group 0 (OpenShift): census k=5 gives the published
    MDAV loss, and no kernel is compiled at run time (no file in the cache is newer than the start)."""
    script = ("touch /tmp/start && microagg --quiet anonymize example:census /tmp/release --k 5 --no-evaluate && "
              "python -c 'import json; print(json.load(open(\"/tmp/release/_report.json\"))[\"information_loss\"])' && "
              "find \"$NUMBA_CACHE_DIR\" -newer /tmp/start -type f | wc -l && id -u")
    for user in ([], ["--user", "54321:0"]):
        lines = docker("run", "--rm", *user, image, "sh", "-c", script, timeout=300).stdout.split()
        il, new_cache_files, uid = float(lines[-3]), int(lines[-2]), int(lines[-1])
        assert il == pytest.approx(9.088, abs=5e-4)
        assert new_cache_files == 0, "a kernel was compiled at run time: the image's cache is not used"
        assert uid == (54321 if user else 10001)


def test_a_job_runs_on_a_cluster_of_containers(image, tmp_path):
    """The scheduler, two workers and the job in four containers of the one image: `microagg run` of a
    job file releases the generated extract k-anonymously, as the same job on this host does."""
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)  # the containers' user writes here
    name = f"microagg-test-{uuid.uuid4().hex[:8]}"
    mount = ["-v", f"{data}:/data"]
    job = f"""
[input]
path = "/data/extract/"
[output]
path = "/data/exports/{{date}}/release"
[anonymize]
k = 5
quasi_identifiers = {json.dumps(QI)}
identifiers = ["person_id"]
method = "mdav"
[cluster]
scheduler = "tcp://{name}-scheduler:8786"
connect_timeout = 30
[evaluate]
run = false
"""
    (data / "job.toml").write_text(job)
    started = []
    docker("network", "create", name)
    try:
        docker("run", "--rm", "--user", "0:0", *mount, image, "microagg", "generate", "/data/extract", "--rows", "30000",
               "--files", "3", "--seed", "7")
        docker("run", "--rm", "--user", "0:0", *mount, image, "chmod", "-R", "a+rwX", "/data")
        docker("run", "-d", "--name", f"{name}-scheduler", "--network", name, image,
               "dask", "scheduler", "--port", "8786", "--no-dashboard")
        started.append(f"{name}-scheduler")
        for w in range(2):
            docker("run", "-d", "--name", f"{name}-worker-{w}", "--network", name, *mount, image,
                   "dask", "worker", f"tcp://{name}-scheduler:8786", "--nthreads", "1", "--memory-limit", "2GiB",
                   "--no-dashboard")
            started.append(f"{name}-worker-{w}")
        t = time.monotonic()
        proc = docker("run", "--rm", "--network", name, *mount, image, "microagg", "run", "/data/job.toml",
                      "--date", "2026-11-25", timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs = docker("logs", f"{name}-worker-0").stderr + docker("logs", f"{name}-worker-1").stderr
        assert logs.count("Registered to") >= 2, logs[-2000:]
        print(f"job on the container cluster: {time.monotonic() - t:.1f} s")
    finally:
        for container in started:
            docker("rm", "-f", container, check=False)
        docker("network", "rm", name, check=False)

    release = data / "exports" / "2026-11-25" / "release"
    report = json.loads((release / "_report.json").read_text())
    assert report["workers"]["count"] == 2  # the containers' workers did the work
    assert all(address.startswith("tcp://") for address in report["workers"]["peak_rss_bytes"])
    original = pd.read_parquet(data / "extract")
    released = pd.read_parquet(release, columns=[c for c in original.columns if c != "person_id"])
    assert len(released) == len(original) and "person_id" not in released.columns
    assert_k_anonymous(released, QI, 5)
    others = [c for c in released.columns if c not in QI]
    pd.testing.assert_frame_equal(released[others], original[others], check_dtype=False)

    host = tmp_path / "host-release"
    proc = subprocess.run([str(Path(sys.executable).parent / "microagg"), "--quiet", "anonymize",
                           str(data / "extract"), str(host), "--k", "5", "--qi", ",".join(QI),
                           "--identifiers", "person_id", "--method", "mdav", "--no-evaluate",
                           "--scheduler", "synchronous"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    here = json.loads((host / "_report.json").read_text())
    assert report["information_loss"] == pytest.approx(here["information_loss"], rel=1e-9)
    assert report["groups"] == here["groups"]
