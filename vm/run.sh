#!/usr/bin/env bash
# vm/run.sh KERNEL JOB [PAYLOAD]: boots the cached Debian 12 image (vm/image.sh) with KERNEL (6.1, 6.12
# or 5.10), runs JOB (a bash script, vm/jobs/*.sh) in it as root and exits with the job's status.
#
# PAYLOAD is a directory from vm/payload.sh (default: a fresh one without test binaries). The guest gets
# PAYLOAD with JOB as job.sh on a second disk (read-only) and a 9p share (host0) holding vm/guest.sh,
# which copies the disk to /opt/sbx/work, runs job.sh there and writes out/job.log (streamed here as it
# grows) and out/status back to the share; then the guest powers off.
#
# The VM: TCG (SBX_VM_ACCEL=kvm where KVM boots Debian's kernels; on this host's PVM it hangs), 2 vCPUs,
# 4 GiB, NO network device (-nic none, always: nothing a test does can leave the VM), a fresh qcow2
# overlay over the cached image (thrown away after), serial console to console.log, and a hard timeout
# (SBX_VM_TIMEOUT seconds, default 3600) after which qemu is killed by its pid. A guest kernel that
# panics while booting (before the job starts) is booted again, at most three boots in all.
# Logs: $SBX_VM_CACHE/logs/KERNEL-JOBNAME/ (console.log, job.log).
set -euo pipefail
cd "$(dirname "$0")/.."
kernel=${1:?usage: vm/run.sh KERNEL JOB [PAYLOAD]} job=${2:?usage: vm/run.sh KERNEL JOB [PAYLOAD]} payload=${3:-}
CACHE=${SBX_VM_CACHE:-/var/cache/sbx-vm}
timeout=${SBX_VM_TIMEOUT:-3600}
accel=${SBX_VM_ACCEL:-tcg}

img=$(vm/image.sh | tail -1)
vmlinuz=$(ls "$img"/vmlinuz-"$kernel".* 2>/dev/null | sort -V | tail -1)
[ -n "$vmlinuz" ] || { echo "vm: no kernel $kernel in $img: $(cd "$img" && ls vmlinuz-*)" >&2; exit 2; }
initrd=$img/initrd.img-${vmlinuz##*/vmlinuz-}

name=$kernel-$(basename "$job" .sh)
run=$CACHE/runs/$name logs=$CACHE/logs/$name
rm -rf "$run" "$logs"
mkdir -p "$run/share/out" "$logs"
if [ -z "$payload" ]; then
	payload=$run/payload
	vm/payload.sh "$payload"
fi
# The job's tree (hard-linked: it is only read), made into an ext4 the guest gets as /dev/vdb.
cp -al "$payload" "$run/job" 2>/dev/null || cp -a "$payload" "$run/job"
cp "$job" "$run/job/job.sh"
cp vm/jobs/lib.sh "$run/job/lib.sh"
mkfs.ext4 -q -L sbxjob -d "$run/job" "$run/job.img" $(($(du -sm "$run/job" | cut -f1) * 2 + 64))M >/dev/null
rm -rf "$run/job"
# The share: what runs the job in the guest, its parameters, and out/ for what comes back.
cp vm/guest.sh "$run/share/guest.sh"
echo "$kernel" >"$run/share/kernel"
# Variables for the job: SBX_VM_* and SBX_TEST_* from the caller's environment. Under TCG the tests'
# timing-sensitive waits are stretched (testutil.Scaled) unless the caller says otherwise.
{
	[ "$accel" = tcg ] && [ -z "${SBX_TEST_TIME_SCALE:-}" ] && echo "export SBX_TEST_TIME_SCALE=10"
	env | grep -E '^SBX_(VM|TEST)_' | sed "s/^\([^=]*\)=\(.*\)/export \1='\2'/"
} >"$run/share/env" || true
case $accel in
kvm) accel_args=(-accel kvm -cpu host) ;;
# -cpu max: every feature TCG has (Landlock, seccomp and the rest do not care; the kernels want x86-64-v1).
*) accel_args=(-accel tcg,thread=multi -cpu max) ;;
esac

# boot: one boot of a fresh overlay, streaming the job's output, until qemu exits or the timeout. Sets
# t0, and booted when the job's first line came (to split boot time from job time).
boot() {
	rm -f "$run/overlay.qcow2" "$run/share/out/job.log" "$run/share/out/status"
	qemu-img create -q -f qcow2 -F raw -b "$img/disk.img" "$run/overlay.qcow2"
	t0=$(date +%s)
	qemu-system-x86_64 "${accel_args[@]}" -machine q35 -smp 2 -m 4096 \
		-nic none -nographic -no-reboot -serial "file:$logs/console.log" -monitor none \
		-kernel "$vmlinuz" -initrd "$initrd" \
		-append "root=/dev/vda rw console=ttyS0 panic=1 systemd.show_status=1 net.ifnames=0 mitigations=off" \
		-drive "file=$run/overlay.qcow2,format=qcow2,if=virtio,cache=unsafe" \
		-drive "file=$run/job.img,format=raw,if=virtio,readonly=on" \
		-virtfs "local,path=$run/share,mount_tag=host0,security_model=none,id=host0" \
		</dev/null >"$logs/qemu.log" 2>&1 &
	qemu=$!
	echo "vm: $name: kernel ${vmlinuz##*/vmlinuz-}, accel $accel, qemu pid $qemu, timeout ${timeout}s, logs $logs" >&2
	tail -n +1 -F "$run/share/out/job.log" 2>/dev/null &
	tailer=$!
	booted=
	while kill -0 $qemu 2>/dev/null; do
		if [ -z "$booted" ] && [ -s "$run/share/out/job.log" ]; then booted=$(date +%s); fi
		if [ $(($(date +%s) - t0)) -ge "$timeout" ]; then
			echo "vm: $name: timeout after ${timeout}s: killing qemu ($qemu)" >&2
			kill "$qemu"; sleep 2; kill -9 "$qemu" 2>/dev/null || true
			break
		fi
		sleep 1
	done
	wait $qemu 2>/dev/null || true
	sleep 1
	kill $tailer 2>/dev/null || true
	wait $tailer 2>/dev/null || true
}

# A guest kernel that panics while booting, before the job's first line, is the emulator's fault
# (multi-threaded TCG has produced rare "Fatal exception in interrupt" panics at boot): boot again, at
# most twice, and say so with the panic's first lines. A panic once the job runs is the job's failure.
for attempt in 1 2 3; do
	boot
	[ -s "$run/share/out/job.log" ] && break
	grep -q "Kernel panic" "$logs/console.log" 2>/dev/null || break
	[ $attempt = 3 ] && break
	echo "vm: $name: the guest kernel panicked while booting, before the job started (attempt $attempt of 3):" >&2
	grep -B2 -A14 -m1 -E "BUG:|Oops|general protection|invalid opcode|Kernel panic" "$logs/console.log" >&2 || true
	cp "$logs/console.log" "$logs/console-panic-$attempt.log"
	echo "vm: $name: booting again" >&2
done
end=$(date +%s)
cp "$run/share/out/job.log" "$logs/job.log" 2>/dev/null || true
# Whatever else the job left in out/ (reports, per-package logs).
cp -a "$run/share/out/." "$logs/" 2>/dev/null || true
rm -f "$run/overlay.qcow2" "$run/job.img"

if [ ! -s "$run/share/out/status" ]; then
	echo "vm: $name: no job status (boot or job failed); last console lines:" >&2
	tail -25 "$logs/console.log" >&2
	exit 3
fi
status=$(cat "$run/share/out/status")
echo "vm: $name: boot $((${booted:-$end} - t0)) s, job (with copy-in and shutdown) $((end - ${booted:-$end})) s, status $status (logs $logs)" >&2
exit "$status"
