#!/bin/sh
# Write stdin to $1 atomically with mode $2 (octal), creating its parents (Machine.write_file).
set -e
mkdir -p "$(dirname "$1")"
tmp="$1.lab-tmp.$$"
cat > "$tmp"
chmod "$2" "$tmp"
mv -f "$tmp" "$1"
