#!/bin/bash
# The lab's hook-tool client, installed under every hook-tool name (slurm_lab.juju.jujuc).
# The hook's tool server (`jujuc.py --serve`, started beside the hook) answers it on a unix
# socket in the machine, $LAB_TOOLS_SOCKET (root only, beside the hook context), as Juju's
# jujuc asks its unit agent over a unix socket: nothing listens on the machine's network.
# This sends the hook's token, the working directory, the hook's context id, the tool, its
# arguments and (for `--file -`) its input, NUL-terminated, and prints the answer
# `code out err`. Bash cannot open a unix socket: perl (perl-base, Essential in Debian and
# Ubuntu, with its Socket module) relays the bytes, a few milliseconds where Python takes ten
# times as long. Without a server (LAB_TOOLS_SOCKET unset) the tool runs in a Python process
# of its own.
tool=${0##*/}
if [ "$tool" = jujuc ]; then
    tool=${1-}
    shift
fi
if [ -z "${LAB_TOOLS_SOCKET-}" ]; then
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
for _ in {1..3000}; do
    [ -S "$LAB_TOOLS_SOCKET" ] && break
    sleep 0.01
done
# shellcheck disable=SC2016 # perl's variables, not the shell's
relay='use Socket;
socket(my $server, PF_UNIX, SOCK_STREAM, 0) or exit 1;
connect($server, pack_sockaddr_un($ARGV[0])) or exit 1;
binmode STDIN; binmode STDOUT;
my $request = do { local $/; <STDIN> } // "";
for (my $sent = 0; $sent < length $request; ) {
    my $n = syswrite($server, $request, 65536, $sent);
    defined $n or exit 1;
    $sent += $n;
}
my $chunk;
print $chunk while sysread($server, $chunk, 65536);'
exec 3< <(
    printf '%s\0' "${LAB_TOOLS_TOKEN-}" "$PWD" "${JUJU_CONTEXT_ID-}" "$tool" "$#" "$@" "$input" |
        /usr/bin/perl -e "$relay" "$LAB_TOOLS_SOCKET" 2>/dev/null
)
IFS= read -r -d '' code <&3
IFS= read -r -d '' out <&3
IFS= read -r -d '' err <&3
exec 3<&-
if [ -z "$code" ]; then
    echo "ERROR cannot reach the hook's tool server" >&2
    exit 1
fi
printf '%s' "$out"
printf '%s' "$err" >&2
exit "$code"
