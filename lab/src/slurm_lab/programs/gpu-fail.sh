#!/bin/sh
# The lab's GPU driver fault (slurm_lab.gpu.fail_driver): the driver stays loaded (its files
# under $1 still mounted) but lists no GPU.
set -e
mountpoint -q /proc/driver
rm -rf "$1"/proc/nvidia/gpus/*
