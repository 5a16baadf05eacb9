#!/usr/bin/env bash
# Start the Dask scheduler on this host, in the foreground (run it under systemd, tmux, nohup...).
#
#   deploy/plain/start-scheduler.sh                       # comm on 8786, dashboard on 8787
#   deploy/plain/start-scheduler.sh --scheduler-file /shared/scheduler.json
#
# Environment: SCHEDULER_PORT (default 8786), DASHBOARD_ADDRESS (default :8787), DASK (the dask
# command, default: dask on the PATH). Extra arguments go to `dask scheduler`.
set -euo pipefail

exec "${DASK:-dask}" scheduler \
    --port "${SCHEDULER_PORT:-8786}" \
    --dashboard-address "${DASHBOARD_ADDRESS:-:8787}" \
    "$@"
