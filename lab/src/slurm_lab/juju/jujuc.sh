#!/bin/bash
# The lab's hook-tool client, installed under every hook-tool name (slurm_lab.juju.jujuc).
# The hook's tool server (`jujuc.py --serve`, started beside the hook) answers it on a unix
# socket in the machine, $LAB_TOOLS_SOCKET (root only, in /run/lab-hook-tools), as Juju's
# jujuc asks its unit agent over a unix socket: nothing listens on the machine's network.
# The request is the hook's token, the working directory, the hook's context id, the tool,
# its arguments and (for `--file -`) its input, NUL-terminated; the answer is `code out err`.
# Bash cannot open a unix socket, so this becomes perl (perl-base is Essential in Debian and
# Ubuntu): one exec, no other process, about as fast as bash's own /dev/tcp was, where Python
# takes ten times as long. Without a server (LAB_TOOLS_SOCKET unset) the tool runs in a
# Python process of its own.
tool=${0##*/}
if [ "$tool" = jujuc ]; then
    tool=${1-}
    shift
fi
if [ -z "${LAB_TOOLS_SOCKET-}" ]; then
    exec /usr/bin/python3 -SE "${0%/*}/jujuc.py" "$tool" "$@"
fi
stdin=0
case $tool in
relation-set | state-set)
    for arg; do
        if [ "$arg" = - ] || [ "$arg" = --file=- ]; then
            stdin=1
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
# No module is loaded (Socket alone takes longer than the rest): Linux's AF_UNIX and
# SOCK_STREAM are 1, and a sockaddr_un is the family then the path.
relay='$SIG{PIPE} = "IGNORE";  # a server that refused the request early still answers
my ($path, $stdin, @fields) = @ARGV;
my $input = "";
if ($stdin) { binmode STDIN; local $/; $input = <STDIN> // ""; $input =~ s/\0.*//s; }
my $request = join("", map { "$_\0" } @fields, $input);
my $server;
unless (socket($server, 1, 1, 0) && connect($server, pack("S", 1) . $path)) {
    print STDERR "ERROR cannot reach the hook'"'"'s tool server\n";
    exit 1;
}
for (my $sent = 0; $sent < length $request; ) {
    my $n = syswrite($server, $request, 65536, $sent);
    last unless defined $n;
    $sent += $n;
}
my ($answer, $chunk) = ("", "");
$answer .= $chunk while sysread($server, $chunk, 65536);
my ($code, $out, $err) = split /\0/, $answer, -1;
unless (defined $code && $code =~ /^[0-9]+$/ && defined $err) {
    print STDERR "ERROR the hook'"'"'s tool server did not answer\n";
    exit 1;
}
binmode STDOUT; binmode STDERR;
print STDOUT $out; print STDERR $err;
exit $code;'
exec /usr/bin/perl -e "$relay" "$LAB_TOOLS_SOCKET" "$stdin" \
    "${LAB_TOOLS_TOKEN-}" "$PWD" "${JUJU_CONTEXT_ID-}" "$tool" "$#" "$@"
