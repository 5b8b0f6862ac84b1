#!/bin/sh
# PID 1 of the NFS test guest (tests/nfs/uml.py boots it): kernel nfsd exporting a guest tmpfs, two
# kernel NFS client mounts of it (two distinct clients = two "nodes"), then the command runner.
# The root filesystem is the host's / (hostfs), so every path is the host's, except the guest-only
# tmpfs mounts below (/run, /var/lib/nfs, /dev/shm, the export, the guest's TMPDIR). Settings: $NFS_TEST_STATE/guest.env.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
. "$NFS_TEST_STATE/guest.env"

ms() { date +%s%3N; }
publish() {  # publish NAME TEXT: write a state file the host polls for (hostfs: sync before rename)
    printf '%s\n' "$2" > "$NFS_TEST_STATE/$1.tmp" && sync && mv "$NFS_TEST_STATE/$1.tmp" "$NFS_TEST_STATE/$1"
    sync
}
fail() {
    echo "nfs guest: setup failed: $*"
    publish failed "$*"
    echo o > /proc/sysrq-trigger; sleep 30
}
T0=$(ms)

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
# bash process substitution and /dev/std* need these; devtmpfs does not make them.
ln -sfn /proc/self/fd /dev/fd; ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout; ln -sfn /proc/self/fd/2 /dev/stderr
mount -t tmpfs run /run || fail "tmpfs on /run"
mount -t tmpfs varlibnfs /var/lib/nfs || fail "tmpfs on /var/lib/nfs"
mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery /var/lib/nfs/sm /var/lib/nfs/sm.bak
touch /var/lib/nfs/etab /var/lib/nfs/rmtab
hostname "$GUEST_HOSTNAME"
ip link set lo up || fail "ip link set lo up"

for module in nfsd nfsv3 nfsv4; do
    modprobe -d "$MODROOT" "$module" || fail "modprobe $module (modules under $MODROOT)"
done
mount -t nfsd nfsd /proc/fs/nfsd || fail "mount the nfsd filesystem"
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs
# hostfs cannot be exported (no export operations): the server's filesystem is a guest tmpfs.
mount -t tmpfs -o "size=$EXPORT_SIZE,mode=0777" nfsexport "$EXPORT_DIR" || fail "tmpfs on $EXPORT_DIR"
# The guest's own temp dir: the host's /tmp is shared through hostfs, and a pid in a name there means
# a process of another kernel (workers sweep the temp dirs of pids that are gone).
mount -t tmpfs -o mode=1777 guesttmp "$NFS_TEST_STATE/tmp" || fail "tmpfs on $NFS_TEST_STATE/tmp"
export TMPDIR="$NFS_TEST_STATE/tmp"
echo 10 > /proc/fs/nfsd/nfsv4leasetime
echo 10 > /proc/fs/nfsd/nfsv4gracetime
# A fresh server refuses new locks while lockd is in grace (5 x nlm_timeout = 50 s by default):
# shorten lockd's grace (read when nfsd starts it) and end nfsd's own grace right after the start.
echo 3 > /proc/sys/fs/nfs/nlm_timeout
echo 3 > /proc/sys/fs/nfs/nlm_grace_period
rpcbind -w || fail "rpcbind"
exportfs -i -o "rw,sync,no_subtree_check,no_root_squash,insecure,fsid=0" "127.0.0.0/8:$EXPORT_DIR" \
    || fail "exportfs $EXPORT_DIR"
rpc.mountd 2>/dev/null || fail "rpc.mountd"
rpc.nfsd 8 || fail "rpc.nfsd"
T_NFSD=$(ms)
echo Y > /proc/fs/nfsd/v4_end_grace 2>/dev/null || true

# Each mount goes to its own server address, so the kernel makes a separate nfs_client for it (own
# connection, caches, NFSv4 client owner): the server sees two clients, as with two real nodes.
do_mount() {  # do_mount MOUNTPOINT ADDRESS CLIENT_ID
    echo "$3" > /sys/fs/nfs/net/nfs_client/identifier
    case ",$MOUNT_OPTS," in *,vers=3,*|*,nfsvers=3,*) spec="$2:$EXPORT_DIR" ;; *) spec="$2:/" ;; esac
    mount -t nfs -o "$MOUNT_OPTS" "$spec" "$1" || fail "mount -t nfs -o $MOUNT_OPTS $spec $1"
    grep -q " $1 nfs" /proc/mounts || fail "$1 is not an NFS mount after mount"
}
do_mount "$MNT1" 127.0.0.1 node1
do_mount "$MNT2" 127.0.0.2 node2
while [ $(( $(ms) - T_NFSD )) -lt 3500 ]; do sleep 0.2; done  # lockd's shortened grace runs out
SETUP_MS=$(( $(ms) - T0 ))
publish ready "setup_ms=$SETUP_MS kernel=$(uname -r)
$(grep ' nfs' /proc/mounts)"
echo "nfs guest: ready"

"$GUEST_PYTHON" "$RUNNER" "$NFS_TEST_STATE/spool"

echo "nfs guest: shutting down"
sync
for mp in $(awk '$3 ~ /^nfs/ {print $2}' /proc/mounts | sort -r); do
    umount "$mp" 2>/dev/null || umount -f -l "$mp"
done
rpc.nfsd 0
exportfs -ua
umount "$EXPORT_DIR" 2>/dev/null
publish stopped "clean"
echo o > /proc/sysrq-trigger
sleep 30
