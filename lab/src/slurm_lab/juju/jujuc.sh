#!/bin/bash
# The lab's hook-tool client, installed under every hook-tool name (slurm_lab.juju.jujuc).
# The hook's tool server (`jujuc.py --serve`, started beside the hook) answers it over the
# machine's loopback, on the port it writes to $LAB_TOOLS_PORT_FILE: this sends the hook's
# token, the working directory, the hook's context id, the tool, its arguments and (for
# `--file -`) its input, NUL-terminated, and prints the answer `code out err`. Bash and its
# /dev/tcp only: no interpreter starts per call. Without a server (LAB_TOOLS_PORT_FILE unset)
# the tool runs in a Python process of its own.
tool=${0##*/}
if [ "$tool" = jujuc ]; then
    tool=${1-}
    shift
fi
if [ -z "${LAB_TOOLS_PORT_FILE-}" ]; then
    exec /usr/bin/python3 -SE "${0%/*}/jujuc.py" "$tool" "$@"
fi
input=
case $tool in
relation-set | state-set)
    for arg; do
        if [ "$arg" = - ] || [ "$arg" = --file=- ]; then
            IFS= read -r -d '' input
            break
        fi
    done
    ;;
esac
# The server starts with the hook: the hook's first call may come before it listens.
port=
for _ in {1..3000}; do
    { IFS= read -r port <"$LAB_TOOLS_PORT_FILE"; } 2>/dev/null && break
    sleep 0.01
done
if [ -z "$port" ] || ! exec 3<>"/dev/tcp/127.0.0.1/$port"; then
    echo "ERROR cannot reach the hook's tool server" >&2
    exit 1
fi
printf '%s\0' "${LAB_TOOLS_TOKEN-}" "$PWD" "${JUJU_CONTEXT_ID-}" "$tool" "$#" "$@" "$input" >&3
IFS= read -r -d '' code <&3
IFS= read -r -d '' out <&3
IFS= read -r -d '' err <&3
exec 3<&-
if [ -z "$code" ]; then
    echo "ERROR the hook's tool server did not answer" >&2
    exit 1
fi
printf '%s' "$out"
printf '%s' "$err" >&2
exit "$code"
