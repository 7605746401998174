#!/bin/sh
# SIGKILL the main process of unit $1 and its children, by PID (Machine.kill_service): on a
# cgroup v1 host `systemctl kill` would signal the same unit of every lab machine.
pid=$(systemctl show -P MainPID "$1")
[ "${pid:-0}" -gt 0 ] || exit 0
pkill -KILL -P "$pid"
kill -KILL "$pid"
