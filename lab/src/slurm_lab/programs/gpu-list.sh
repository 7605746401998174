#!/bin/sh
# The lab's simulated NVIDIA GPUs (slurm_lab.gpu): (re)write the driver's GPU list under $1
# (the machine's state dir; the bind mounts show it at once): one GPU per pair of arguments
# after it, its PCI bus id and its /proc information file.
set -e
state=$1
shift
rm -rf "$state/proc/nvidia/gpus" "$state/sys/nvidia"
mkdir -p "$state/proc/nvidia/gpus" "$state/sys/nvidia"
cpus=0-$(($(nproc --all) - 1))
while [ "$#" -ge 2 ]; do
    mkdir -p "$state/proc/nvidia/gpus/$1" "$state/sys/nvidia/$1"
    printf %s "$2" > "$state/proc/nvidia/gpus/$1/information"
    echo "$cpus" > "$state/sys/nvidia/$1/local_cpulist"
    shift 2
done
