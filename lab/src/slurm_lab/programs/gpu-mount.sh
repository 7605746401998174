#!/bin/sh
# The lab's simulated NVIDIA GPUs (slurm_lab.gpu): bind the files under $1 over /proc/driver
# and /sys/bus/pci/drivers and make the device nodes of $3 GPUs (character devices, major $2).
# Run by the lab, and by slurm-lab-gpu.service at every boot (a power cycle drops both).
set -e
state=$1 major=$2 count=$3
mountpoint -q /proc/driver || mount --bind "$state/proc" /proc/driver
mountpoint -q /sys/bus/pci/drivers || mount --bind "$state/sys" /sys/bus/pci/drivers
[ -e /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c "$major" 255
minor=0
while [ "$minor" -lt "$count" ]; do
    [ -e "/dev/nvidia$minor" ] || mknod -m 0666 "/dev/nvidia$minor" c "$major" "$minor"
    minor=$((minor + 1))
done
