#!/usr/bin/env bash
# Run a microagg job file on a running Dask scheduler, whatever its [cluster] section says.
#
#   deploy/plain/run-job.sh JOB.toml tcp://HOST:8786 [microagg run options, e.g. --date 2026-03-04]
#
# Writes a copy of the job file with [cluster] scheduler = the address (deploy/job_for_scheduler.py;
# relative paths made absolute, {date} kept), checks it with `microagg validate`, runs it with
# `microagg run`, removes the copy. Exit code: microagg's (0 ok, 2 bad job file or input, 3 release
# gate, 4 scheduler unreachable). A job file that already names the scheduler needs none of this:
# `microagg run JOB.toml`.
# Environment: MICROAGG (the microagg command), PYTHON (a Python with microagg installed).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: run-job.sh JOB.toml tcp://SCHEDULER:8786 [microagg run options]" >&2
    exit 2
fi
job_file=$1
address=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
microagg=${MICROAGG:-microagg}
python=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/microagg-job.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

job_copy=$("$python" "$here/../job_for_scheduler.py" "$job_file" "$address" "$tmp")
"$microagg" validate "$job_copy" "$@"
"$microagg" run "$job_copy" "$@"
