#!/bin/bash
# Runs in the guest, as root, from the 9p share (/mnt/host), started by sbx-vm-job.service after
# multi-user.target (see vm/image.sh); the guest powers off when it returns.
# The job's files come on a second disk (/dev/vdb, an ext4 that vm/run.sh makes of the payload: 9p is
# slow under TCG, well under 1 MB/s for the payload's binaries) and are copied to /opt/sbx/work (a
# local ext4 like the host tests have; /tmp is emptied at boot); job.sh runs there. Its output goes to
# the share's out/job.log as it comes (vm/run.sh streams it), its status to out/status.
out=/mnt/host/out
mkdir -p $out
{
	echo "guest: $(uname -r), up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) cpus, cgroup: $(stat -fc %T /sys/fs/cgroup)"
	start=$(date +%s)
	mkdir -p /mnt/job
	mount -o ro /dev/vdb /mnt/job || { echo "guest: no job disk"; echo 3 >$out/status; exit; }
	rm -rf /opt/sbx/work && mkdir -p /opt/sbx/work
	cp -a /mnt/job/. /opt/sbx/work/
	umount /mnt/job
	echo "guest: job files copied in $(($(date +%s) - start)) s"
	cd /opt/sbx/work
	export PATH=/opt/sbx/work/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
	export SBX_VM_KERNEL=$(cat /mnt/host/kernel) SBX_VM_OUT=$out
	. /mnt/host/env
	start=$(date +%s)
	bash ./job.sh
	status=$?
	echo "guest: job exited $status after $(($(date +%s) - start)) s"
	echo $status >$out/status.tmp && mv $out/status.tmp $out/status
} >>$out/job.log 2>&1 </dev/null
