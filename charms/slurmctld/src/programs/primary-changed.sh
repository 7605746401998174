#!/bin/sh
# Written by the slurmctld charm (SlurmctldPrimaryOnProg, SlurmctldPrimaryOffProg).
# slurmctld runs this as SlurmUser; a root systemd path unit watching the file
# below wakes the charm (slurmctld-charm-primary.path).
exec /usr/bin/date -u +%s > /run/slurmctld-charm/primary-changed
