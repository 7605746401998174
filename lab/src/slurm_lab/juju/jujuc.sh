#!/bin/bash
# The lab's hook-tool client, installed under every hook-tool name (slurm_lab.juju.jujuc).
# A hook's tool server (`jujuc.py --serve`) answers it over the machine's loopback: this sends
# the server's token, the working directory, the hook's context id, the tool, its arguments
# and (for `--file -`) its input, NUL-terminated, and prints the answer `code out err`. Bash
# and its /dev/tcp only: no interpreter starts per call. Without a server (LAB_TOOLS_PORT
# unset) the tool runs in a Python process of its own.
tool=${0##*/}
if [ "$tool" = jujuc ]; then
    tool=${1-}
    shift
fi
if [ -z "${LAB_TOOLS_PORT-}" ]; then
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
if ! exec 3<>"/dev/tcp/127.0.0.1/$LAB_TOOLS_PORT"; then
    echo "ERROR cannot reach the hook's tool server" >&2
    exit 1
fi
printf '%s\0' "$LAB_TOOLS_TOKEN" "$PWD" "${JUJU_CONTEXT_ID-}" "$tool" "$#" "$@" "$input" >&3
IFS= read -r -d '' code <&3
IFS= read -r -d '' out <&3
IFS= read -r -d '' err <&3
exec 3<&-
printf '%s' "$out"
printf '%s' "$err" >&2
exit "${code:-1}"
