#!/usr/bin/env bash
# A Docker engine for `make test-docker`.
#   deploy/docker-engine.sh start   exit 0 when an engine answers (one already running, or a
#                                   dockerd started here); exit 3 when no engine can run on
#                                   this machine (the reason is printed); other codes: errors
#   deploy/docker-engine.sh stop    stops the dockerd that `start` started, if any
# State (pid file, dockerd log) goes to $KRAFTY_DOCKER_STATE (default build/docker-engine).
set -uo pipefail
STATE=${KRAFTY_DOCKER_STATE:-build/docker-engine}
PIDFILE=$STATE/dockerd.pid

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# start_dockerd LOG [OPTIONS...]: 0 when the engine answers within 60 s
start_dockerd() {
    local log=$1; shift
    setsid dockerd "$@" >"$log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 1 60); do
        if engine_answers; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then return 1; fi
        sleep 1
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 1
}

case "${1:-}" in
start)
    if engine_answers; then
        echo "docker-engine: an engine is already running"
        exit 0
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        echo "docker-engine: dockerd is not installed (apt-get install docker.io)" >&2
        exit 2
    fi
    mkdir -p "$STATE"
    # the default (overlay2, iptables NAT), then without iptables and with the vfs driver,
    # which need nothing from the kernel but namespaces and cgroups
    if start_dockerd "$STATE/dockerd.log"; then
        echo "docker-engine: dockerd started (pid $(cat "$PIDFILE"), log $STATE/dockerd.log)"
        exit 0
    fi
    if start_dockerd "$STATE/dockerd-vfs.log" --iptables=false --storage-driver=vfs; then
        echo "docker-engine: dockerd started with --iptables=false --storage-driver=vfs (pid $(cat "$PIDFILE"))"
        exit 0
    fi
    rm -f "$PIDFILE"
    echo "docker-engine: no Docker engine can run on this machine; dockerd said:" >&2
    tail -n 5 "$STATE/dockerd.log" "$STATE/dockerd-vfs.log" >&2
    exit 3
    ;;
stop)
    if [ -f "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        rm -f "$PIDFILE"
        # a stale pid file (dockerd gone, pid reused) must not make us kill someone else
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
            echo "docker-engine: dockerd (pid $pid) is not running"
            exit 0
        fi
        kill "$pid" 2>/dev/null
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$pid" 2>/dev/null
        echo "docker-engine: dockerd (pid $pid) stopped"
    fi
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
