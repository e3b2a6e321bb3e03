#!/usr/bin/env bash
# A RAMCloud cluster on loopback for the RAMCloud plug-in: one coordinator and SERVERS master
# servers (each its own process; they share this machine's CPUs — say so next to any figure).
#   plugins/ramcloud/cluster.sh start     # coordinator on 127.0.0.1:11100, servers from :11101
#   plugins/ramcloud/cluster.sh stop      # stops what start started (pids in $RUN_DIR), nothing else,
#                                         # and waits for it to exit
# RAMCLOUD_BIN: the obj/ directory build.sh made (default target/plugins/ramcloud/src/obj);
# SERVERS (1), MEMORY_MB per server (2048), REPLICAS (0: masters only, no backups), RUN_DIR
# (target/plugins/ramcloud/run: logs and pids), CLUSTER (main), MAX_CORES (RAMCloud's
# --maxCores for each process: dispatch and worker threads; default 2, RAMCloud's own is 4), CPUS (a taskset CPU list for
# the coordinator and servers, e.g. 1: RAMCloud's threads poll, so on a small machine keep them
# off the client's CPUs and record the pinning with the figures).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${RAMCLOUD_BIN:-target/plugins/ramcloud/src/obj}
RUN_DIR=${RUN_DIR:-target/plugins/ramcloud/run}
SERVERS=${SERVERS:-1}
MEMORY_MB=${MEMORY_MB:-2048}
REPLICAS=${REPLICAS:-0}
CLUSTER=${CLUSTER:-main}
MAX_CORES=${MAX_CORES:-2}
pin=()
[ -n "${CPUS:-}" ] && pin=(taskset -c "$CPUS")
COORD="tcp:host=127.0.0.1,port=11100"
case "${1:-}" in
  start)
    [ -x "$BIN/coordinator" ] && [ -x "$BIN/server" ] || { echo "error: no coordinator/server in $BIN (run plugins/ramcloud/build.sh first, or set RAMCLOUD_BIN)" >&2; exit 2; }
    mkdir -p "$RUN_DIR"
    if ls "$RUN_DIR"/*.pid >/dev/null 2>&1; then echo "error: $RUN_DIR has pids of a running cluster: stop it first" >&2; exit 2; fi
    "${pin[@]}" "$BIN/coordinator" -C "$COORD" --clusterName "$CLUSTER" --maxCores "$MAX_CORES" > "$RUN_DIR/coordinator.log" 2>&1 &
    echo $! > "$RUN_DIR/coordinator.pid"
    sleep 1
    backup=(--masterOnly)
    [ "$REPLICAS" -gt 0 ] && backup=(--file "$RUN_DIR/backup")
    for i in $(seq 1 "$SERVERS"); do
      port=$((11100 + i))
      [ "$REPLICAS" -gt 0 ] && backup=(--file "$RUN_DIR/backup-$i.log")
      "${pin[@]}" "$BIN/server" -L "tcp:host=127.0.0.1,port=$port" -C "$COORD" --clusterName "$CLUSTER" \
        -r "$REPLICAS" -t "$MEMORY_MB" --maxCores "$MAX_CORES" "${backup[@]}" > "$RUN_DIR/server-$i.log" 2>&1 &
      echo $! > "$RUN_DIR/server-$i.pid"
    done
    # Ready when every server has enlisted with the coordinator (a server first touches all
    # of its memory: about 2.5 s per GB here).
    for _ in $(seq 1 300); do
      n=$( (grep -l "Enlisted; serverId" "$RUN_DIR"/server-*.log 2>/dev/null || true) | wc -l)
      [ "$n" -ge "$SERVERS" ] && { echo "RAMCloud: coordinator $COORD, $SERVERS server(s); logs in $RUN_DIR" >&2; exit 0; }
      sleep 0.2
    done
    echo "error: the servers did not enlist within 60 s; see $RUN_DIR/*.log" >&2
    exit 1 ;;
  stop)
    # Signals only a process that is still RAMCloud's (a pid file can outlive its process, and
    # the pid be reused), then waits until it has exited (a server takes a few seconds after
    # SIGTERM) so a cluster started next finds its ports free; SIGKILL after 10 s. A pid file
    # goes once its process has.
    ours() { case "$(cat "/proc/$1/comm" 2>/dev/null)" in coordinator|server) return 0 ;; *) return 1 ;; esac; }
    for f in "$RUN_DIR"/*.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      if ours "$pid"; then kill "$pid" 2>/dev/null || true; fi
    done
    for f in "$RUN_DIR"/*.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      for _ in $(seq 1 100); do ours "$pid" || break; sleep 0.1; done
      if ours "$pid"; then
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do ours "$pid" || break; sleep 0.1; done
      fi
      rm -f "$f"
    done ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
