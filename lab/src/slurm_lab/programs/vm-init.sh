#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
for module in $(/bin/busybox cat /modules.order); do
    /bin/busybox insmod "/modules/$module" 2>/dev/null
done
tries=0
while [ ! -b /dev/vda ] && [ "$tries" -lt 500 ]; do
    /bin/busybox usleep 10000
    tries=$((tries + 1))
done
/bin/busybox mount -t ext4 -o rw,noatime /dev/vda /newroot || {
    echo "initramfs: cannot mount /dev/vda"; exec /bin/busybox sh
}
/bin/busybox umount /sys /proc
/bin/busybox mount --move /dev /newroot/dev
exec /bin/busybox switch_root /newroot /sbin/init
