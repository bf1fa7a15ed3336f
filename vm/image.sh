#!/usr/bin/env bash
# Builds the Debian 12 VM image that make test-vm boots, and prints its directory on the last line.
#
# The image is cached in $SBX_VM_CACHE (/var/cache/sbx-vm) under a key that is a hash of this script:
# editing the package list (or anything else here) builds a new one. Downloaded .debs are kept in
# $SBX_VM_CACHE/debs across rebuilds. The image dir holds:
#   disk.img                 raw ext4 root filesystem (run.sh boots a qcow2 overlay of it: it stays clean)
#   vmlinuz-V, initrd.img-V  the kernels, taken out of the rootfs' /boot: 6.1 and 6.12 from bookworm,
#                            5.10 from bullseye (installed into the same rootfs, modules included)
#
# The guest: systemd, an ordinary user sbxuser (uid 1000, subuid/subgid ranges, lingering so that
# user@1000.service and its delegated cgroup exist from boot), and sbx-vm-job.service, which after
# multi-user.target mounts the 9p share host0, runs its guest.sh (vm/guest.sh) and powers off.
set -euo pipefail

CACHE=${SBX_VM_CACHE:-/var/cache/sbx-vm}
MIRROR=http://deb.debian.org/debian
SECURITY=http://deb.debian.org/debian-security
SIZE=8G

# What the guest needs at run time: Makefile's DEBS without the build-only ones (libseccomp-dev,
# pkg-config; libc6-dev stays: gcc links the battery's C programs), tools the tests and jobs call
# (sudo, runuser/nsenter from util-linux, pgrep, fuser, mkfs.ext4), and the user session pieces:
# libpam-systemd and dbus-user-session give sbxuser a user bus for systemd-run --user --scope.
# apparmor: as a stock Debian 12 has it (Makefile's DEBS has it for apparmor_parser too). The compat
# scripts run a developer's everyday tools: git, make, gpg/gpgconf, ssh-keygen, python3's venv.
GUEST_DEBS="apparmor iproute2 nftables bubblewrap runc crun busybox-static jq python3 strace curl gcc libc6-dev
  uidmap passt sudo util-linux procps psmisc e2fsprogs libpam-systemd dbus-user-session ca-certificates
  git make gpg gpg-agent gpgconf openssh-client python3-venv xz-utils zstd file"
# Kernels: bookworm's default 6.1 and its 6.12 (from bookworm-security, where the meta package lives).
KERNELS="linux-image-amd64 linux-image-6.12-amd64"
# The oldest: bullseye's 5.10 (no Landlock: sbx must refuse there).
OLD_SUITE=bullseye

KEY=$(sha256sum "$0" | cut -c1-16)
IMG=$CACHE/image-$KEY
if [ -f "$IMG/done" ]; then
	echo "vm image: cached ($IMG)" >&2
	echo "$IMG"
	exit 0
fi

for p in qemu-system-x86 qemu-utils debootstrap e2fsprogs; do dpkg -s $p >/dev/null 2>&1 || missing="${missing:-} $p"; done
if [ -n "${missing:-}" ]; then
	echo "installing:$missing" >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# One build at a time (make test-vm runs in parallel would race for the build dir): wait for the
# other, then use what it built.
mkdir -p "$CACHE"
exec 9>"$CACHE/image.lock"
flock 9
if [ -f "$IMG/done" ]; then
	echo "$IMG"
	exit 0
fi

T0=$(date +%s)
step() { # step NAME CMD...: runs CMD and says how long it took.
	local name=$1 t=$(date +%s); shift
	echo "vm image: $name ..." >&2
	"$@"
	echo "vm image: $name: $(($(date +%s) - t)) s" >&2
}

BUILD=$CACHE/build-$KEY
ROOT=$BUILD/rootfs
mkdir -p "$CACHE/debs/partial"
# Unmount whatever the chroot had mounted, however the script ends.
cleanup() {
	for m in var/cache/apt/archives dev/pts dev proc sys; do
		mountpoint -q "$ROOT/$m" 2>/dev/null && umount -l "$ROOT/$m"
	done
	return 0
}
trap cleanup EXIT
cleanup
rm -rf "$BUILD"
mkdir -p "$BUILD"

in_root() { chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

bootstrap() {
	debootstrap --variant=minbase --cache-dir="$CACHE/debs" \
		--include=systemd,systemd-sysv,dbus,udev,kmod,initramfs-tools \
		bookworm "$ROOT" "$MIRROR" >"$BUILD/debootstrap.log" 2>&1 ||
		{ tail -20 "$BUILD/debootstrap.log" >&2; return 1; }
}

mount_chroot() {
	mount -t proc proc "$ROOT/proc"
	mount -t sysfs sys "$ROOT/sys"
	mount --bind /dev "$ROOT/dev"
	mount --bind /dev/pts "$ROOT/dev/pts"
	mount --bind "$CACHE/debs" "$ROOT/var/cache/apt/archives"
	# No service starts inside the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
	chmod +x "$ROOT/usr/sbin/policy-rc.d"
}

packages() {
	cat >"$ROOT/etc/apt/sources.list" <<-EOF
		deb $MIRROR bookworm main
		deb $MIRROR bookworm-updates main
		deb $SECURITY bookworm-security main
	EOF
	in_root apt-get update -qq
	# shellcheck disable=SC2086
	in_root apt-get install -y -qq --no-install-recommends $GUEST_DEBS $KERNELS >"$BUILD/apt.log" 2>&1 ||
		{ tail -30 "$BUILD/apt.log" >&2; return 1; }
}

# The bullseye kernel: its .deb fetched with apt-get download from a throwaway apt config that knows
# only bullseye, then installed with dpkg into this rootfs (its dependencies, kmod, linux-base and
# initramfs-tools, are bookworm's); its postinst makes the initrd with bookworm's mkinitramfs.
old_kernel() {
	local d=/var/tmp/old-apt
	mkdir -p "$ROOT$d/lists/partial" "$ROOT$d/archives/partial"
	echo "deb $MIRROR $OLD_SUITE main" >"$ROOT$d/sources.list"
	local opts="-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$d/lists -o Dir::Cache::Archives=$d/archives -o Dir::Cache=$d -o Dir::State::status=/dev/null"
	in_root apt-get $opts update -qq
	# The meta package names the current ABI's image package (dpkg's status left out: it has bookworm's).
	local pkg
	pkg=$(in_root apt-cache $opts depends linux-image-amd64 | awk '/Depends: linux-image-5/ {print $2; exit}')
	[ -n "$pkg" ] || { echo "no 5.10 kernel in $OLD_SUITE" >&2; return 1; }
	echo "vm image: $OLD_SUITE kernel $pkg" >&2
	# Downloaded into the bind-mounted .deb cache, kept across rebuilds.
	in_root sh -c "cd /var/cache/apt/archives && apt-get $opts download $pkg" >/dev/null 2>&1
	in_root sh -c "dpkg -i /var/cache/apt/archives/${pkg}_*.deb" >"$BUILD/old-kernel.log" 2>&1 ||
		{ tail -20 "$BUILD/old-kernel.log" >&2; return 1; }
	rm -rf "$ROOT$d"
}

configure() {
	echo sbx-vm >"$ROOT/etc/hostname"
	# As a Debian install writes it (debootstrap leaves none): localhost is 127.0.0.1 and ::1.
	printf '127.0.0.1\tlocalhost\n127.0.1.1\tsbx-vm\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' >"$ROOT/etc/hosts"
	echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$ROOT/etc/fstab"
	# The host's first nameserver is what sbx's DNS filter forwards to by default; the VM has no network,
	# so this is only an address (tests that need a resolver bring their own, e.g. fakenet).
	echo "nameserver 127.0.0.53" >"$ROOT/etc/resolv.conf"
	in_root useradd -m -u 1000 -s /bin/bash sbxuser
	echo "sbxuser:100000:65536" >"$ROOT/etc/subuid"
	echo "sbxuser:100000:65536" >"$ROOT/etc/subgid"
	# loginctl enable-linger sbxuser, done offline: logind starts user@1000.service at boot.
	mkdir -p "$ROOT/var/lib/systemd/linger"
	touch "$ROOT/var/lib/systemd/linger/sbxuser"
	echo "sbxuser ALL=(ALL) NOPASSWD: ALL" >"$ROOT/etc/sudoers.d/sbxuser"
	mkdir -p "$ROOT/opt/sbx" "$ROOT/mnt/host"

	# stock udev makes /dev/net/tun 0666 (pasta opens it without root): check that the rule is there.
	grep -rqs 'KERNEL=="tun".*MODE="0666"' "$ROOT/usr/lib/udev/rules.d/" ||
		{ echo "no udev rule making /dev/net/tun 0666" >&2; return 1; }

	# Boot faster and keep the boot quiet: nothing here needs timers, a getty or apt's jobs.
	for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
		fstrim.timer getty@tty1.service serial-getty@ttyS0.service; do
		ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
	done

	# The job runner: mounts the share and runs its guest.sh (vm/guest.sh: kept on the host, so that
	# changing it needs no new image), then powers off whatever happened.
	cat >"$ROOT/usr/local/sbin/sbx-vm-job" <<-'EOF'
		#!/bin/bash
		mkdir -p /mnt/host
		mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 host0 /mnt/host && bash /mnt/host/guest.sh
		sync
		systemctl poweroff --no-block
	EOF
	chmod +x "$ROOT/usr/local/sbin/sbx-vm-job"
	cat >"$ROOT/etc/systemd/system/sbx-vm-job.service" <<-'EOF'
		[Unit]
		Description=sbx VM test job (the 9p share's job.sh)
		After=multi-user.target user@1000.service
		Wants=user@1000.service

		[Service]
		Type=oneshot
		ExecStart=/usr/local/sbin/sbx-vm-job
		StandardOutput=journal+console
		TimeoutStartSec=infinity

		[Install]
		WantedBy=multi-user.target
	EOF
	ln -sf /etc/systemd/system/sbx-vm-job.service "$ROOT/etc/systemd/system/multi-user.target.wants/sbx-vm-job.service"
	rm -f "$ROOT/usr/sbin/policy-rc.d"
	in_root apt-get clean
}

collect() {
	cleanup
	local n=0
	for k in "$ROOT"/boot/vmlinuz-*; do
		v=${k##*/vmlinuz-}
		cp "$k" "$BUILD/vmlinuz-$v"
		cp "$ROOT/boot/initrd.img-$v" "$BUILD/initrd.img-$v"
		chmod 644 "$BUILD/vmlinuz-$v" "$BUILD/initrd.img-$v"
		n=$((n + 1))
	done
	ls "$BUILD"/vmlinuz-6.1.* "$BUILD"/vmlinuz-6.12.* "$BUILD"/vmlinuz-5.10.* >/dev/null
	echo "vm image: kernels: $(cd "$BUILD" && ls vmlinuz-* | sed 's/vmlinuz-//' | tr '\n' ' ')" >&2
	mkfs.ext4 -q -L sbxroot -d "$ROOT" "$BUILD/disk.img" $SIZE
}

step debootstrap bootstrap
mount_chroot
step "guest packages and kernels" packages
step "$OLD_SUITE kernel" old_kernel
step configure configure
step "disk image" collect
rm -rf "$ROOT"
rm -rf "$IMG" && mv "$BUILD" "$IMG" && touch "$IMG/done"
# Older images are of an older script: only the current one is kept.
for old in "$CACHE"/image-* "$CACHE"/build-*; do [ "$old" = "$IMG" ] || rm -rf "$old"; done
echo "vm image: built in $(($(date +%s) - T0)) s ($IMG, $(du -sh --apparent-size "$IMG/disk.img" | cut -f1) apparent, $(du -sh "$IMG/disk.img" | cut -f1) used)" >&2
echo "$IMG"
