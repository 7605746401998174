#!/bin/sh
# Written by the slurmctld charm (SlurmctldPrimaryOnProg, SlurmctldPrimaryOffProg).
# slurmctld runs this as SlurmUser: it dates the change, then raises the flag a
# root systemd path unit waits for to wake the charm (slurmctld-charm-primary.path).
/usr/bin/date -u +%s > /run/slurmctld-charm/primary-changed
exec /usr/bin/date -u +%s > /run/slurmctld-charm/wake
