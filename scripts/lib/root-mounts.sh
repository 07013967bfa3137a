# root-mounts.sh: the mounts a Debian root needs to run things in it, sourced by
# scripts/debian-root.sh and scripts/lane.sh (one helper for one job), and what
# scripts/setup.sh leaves out there.
#
# Callers run in a private mount namespace of their own (root_private_namespace
# re-executes the calling script under `unshare --mount`), so nothing mounted here
# is ever seen by the host or by anyone else using the same root, and every mount
# goes away with the namespace even when the script is killed; root_unmount_all
# (from an EXIT trap) still unmounts them in reverse order for a clean exit.

# What scripts/setup.sh leaves out in a root (PORTAL_SETUP_WITHOUT), the same when
# debian-root.sh installs the root's packages and when lane.sh sets up and builds
# there: a Slurm cluster (the lanes skip e2e.slurm) and debootstrap.
ROOT_SETUP_WITHOUT="slurm lanes"

# The mount points this script mounted, in order.
ROOT_MOUNTS=()
# Set in the environment of the re-executed script, so it does not unshare again.
ROOT_NAMESPACE_MARK=PORTAL_ROOT_NAMESPACE

# root_private_namespace SCRIPT ARGS...: re-exec SCRIPT in a private mount
# namespace unless already in one.  Does not return when it re-executes.
root_private_namespace() {
  if [ "${!ROOT_NAMESPACE_MARK:-}" = 1 ]; then
    return 0
  fi
  export "$ROOT_NAMESPACE_MARK=1"
  exec unshare --mount --propagation private -- bash "$@"
}

# root_mount ROOT WHAT: mount one thing into ROOT.  WHAT is one of
#   proc            a proc of this namespace's processes at ROOT/proc
#   dev             the host's /dev (recursive bind, slave: nothing propagates back)
#   shm             a fresh tmpfs at ROOT/dev/shm (after dev)
#   sys             the host's /sys read-only (cgroup limits for the tripwire)
#   bind SRC DST    SRC at ROOT/DST, read-write
#   robind SRC DST  SRC at ROOT/DST, read-only
root_mount() {
  local root=$1 what=$2 target
  case "$what" in
    proc) target=$root/proc; mount -t proc proc "$target" ;;
    dev)  target=$root/dev; mount --rbind /dev "$target"; mount --make-rslave "$target" ;;
    shm)  target=$root/dev/shm; mkdir -p "$target"; mount -t tmpfs -o mode=1777,nosuid,nodev shm "$target" ;;
    sys)  target=$root/sys; mount --rbind /sys "$target"; mount --make-rslave "$target"
          mount -o remount,bind,ro "$target" ;;
    bind|robind)
          target=$root/${4#/}; mkdir -p "$target"; mount --bind "$3" "$target"
          if [ "$what" = robind ]; then mount -o remount,bind,ro "$target"; fi ;;
    *) echo "portal: root-mounts: unknown mount kind '$what'" >&2; return 1 ;;
  esac
  ROOT_MOUNTS+=("$target")
}

# root_unmount_all: unmount what root_mount mounted, last first (recursive for the
# rbinds); a mount that will not go is detached lazily, and goes with the namespace.
root_unmount_all() {
  local i
  for ((i = ${#ROOT_MOUNTS[@]} - 1; i >= 0; i--)); do
    umount -R "${ROOT_MOUNTS[i]}" 2>/dev/null || umount -R -l "${ROOT_MOUNTS[i]}" 2>/dev/null || true
  done
  ROOT_MOUNTS=()
}
