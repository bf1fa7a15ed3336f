# Rootless limits through the cgroup systemd delegates (vm/run.sh KERNEL vm/jobs/rootless-cgroup.sh
# [PAYLOAD]): sbxuser, in a `systemd-run --user --scope -p Delegate=yes` of its user manager, runs sbx:
# the cgroup row of sbx version, an OOM kill and a pids limit hit reported as root's are, a process
# left running found through the freezer, limits.enforced saying cgroup, limits.require: cgroup
# satisfied, and no run's cgroup (sbx-*) left below the delegated one, after a crashed run either once
# sbx gc ran. In a scope without Delegate=yes (lib.sh's as_user), whose unit systemd stops at an OOM
# kill below it, sbx keeps to rlimits and says why. With a payload holding sandbox/sandbox.test
# (go test -c -tags seccomp ./sandbox), TestDelegatedRun runs too: as root (it delegates a cgroup to a
# user it adds) and as sbxuser in a Delegate=yes scope.
. ./lib.sh
set -u
VERBOSE=1 # every check's output, passing ones' too
# as_user_delegated CMD...: lib.sh's as_user in a scope with Delegate=yes.
as_user_delegated() {
	setpriv --reuid=1000 --regid=1000 --init-groups --reset-env -- \
		env HOME=/home/sbxuser USER=sbxuser LOGNAME=sbxuser PATH=/opt/sbx/work/bin:/usr/bin:/bin \
		XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus \
		sh -c 'cd /home/sbxuser && exec systemd-run --user --scope --quiet -p Delegate=yes -- "$@"' as_user "$@"
}
W=/opt/sbx/rootless-cgroup
rm -rf $W && mkdir -p $W && chmod 777 $W
cd $W
echo "kernel $(uname -r); cgroup $(stat -fc %T /sys/fs/cgroup); root controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "sbxuser's scopes: $(as_user cat /proc/self/cgroup), with Delegate=yes: $(as_user_delegated cat /proc/self/cgroup)"

# root's OOM report, the reference: exit_code, oom_killed and verdict of a rootless run must match it.
root_ref() {
	"$SBX" exec -q --json $W/root-mem.json --memory 64M -- python3 -c 'b = bytearray(320 << 20)' >/dev/null 2>$W/root-mem.err
	echo "status $?"
	jq -c '{verdict, exit_code, oom_killed, limits}' $W/root-mem.json
	want "jq -e '.oom_killed == true' $W/root-mem.json >/dev/null" "root: oom_killed true"
}
check "root's report of an OOM kill (the reference)" root_ref

# Everything of sbxuser's in one scope, so that the runs' cgroups are looked for where they were made
# (systemd removes a scope's cgroup tree once its last process is gone).
cat >$W/user.sh <<'EOF'
#!/bin/bash
W=/opt/sbx/rootless-cgroup
SBX=/opt/sbx/work/bin/sbx
cd ~
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
base=/sys/fs/cgroup${own%/leaf}
echo "own cgroup: $own"
echo "controllers: $(cat /sys/fs/cgroup$own/cgroup.controllers); subtree_control before: '$(cat /sys/fs/cgroup$own/cgroup.subtree_control)'"
$SBX version >$W/version.out 2>&1
$SBX version --json >$W/version.json 2>&1
$SBX exec -q --json $W/mem.json --memory 64M -- python3 -c 'b = bytearray(320 << 20)' >/dev/null 2>$W/mem.err
echo $? >$W/mem.status
$SBX exec -q --json $W/pids.json --pids 20 -- sh -c 'i=0; while [ $i -lt 60 ]; do sleep 3 & i=$((i+1)); done; wait' >/dev/null 2>$W/pids.err
echo $? >$W/pids.status
$SBX exec -q --json $W/bg.json -- sh -c 'sleep 120 & echo started; exit 0' >/dev/null 2>$W/bg.err
echo $? >$W/bg.status
# The sandbox has no /sys/fs/cgroup: its cgroup's cpu.max is read here while it runs.
$SBX exec -q --json $W/cpu.json --cpus 0.5 -- sleep 5 >/dev/null 2>$W/cpu.err &
cpu=$!
for i in $(seq 200); do cat $base/sbx-*/cpu.max >$W/cpu.out 2>/dev/null && [ -s $W/cpu.out ] && break; sleep 0.1; done
wait $cpu
echo $? >$W/cpu.status
printf 'version: 1\nextends: default\nlimits:\n  require: cgroup\n  memory: 128M\n  pids: 64\n' >$W/cg.yaml
$SBX exec -q -p $W/cg.yaml -- true >$W/require.out 2>&1
echo $? >$W/require.status
echo "delegated: $base; subtree_control after: '$(cat $base/cgroup.subtree_control)'; children: $(cd $base && ls -d */ | tr '\n' ' ')"
ls -d $base/sbx-* >$W/left.out 2>/dev/null
# A crashed run: sbx killed while its command runs leaves the run's cgroup; sbx gc removes it.
$SBX exec -q -- sleep 600 >/dev/null 2>&1 &
sbx=$!
for i in $(seq 600); do ls -d $base/sbx-* >/dev/null 2>&1 && [ -n "$(cat $base/sbx-*/cgroup.procs 2>/dev/null)" ] && break; sleep 0.1; done
kill -9 $sbx
wait $sbx 2>/dev/null
sleep 1
ls -d $base/sbx-* >$W/crash-left.out 2>/dev/null
$SBX gc >$W/gc.out 2>&1
echo $? >$W/gc.status
ls -d $base/sbx-* >$W/gc-left.out 2>/dev/null
true
EOF
chmod 755 $W/user.sh
as_user_delegated $W/user.sh
echo "the scope ended with status $?"

# A scope without Delegate=yes: rlimits, the reason said, and the scope outlives the run.
cat >$W/plain.sh <<'EOF'
#!/bin/bash
W=/opt/sbx/rootless-cgroup
SBX=/opt/sbx/work/bin/sbx
cd ~
$SBX version >$W/plain-version.out 2>&1
$SBX exec -q --json $W/plain-mem.json --memory 64M -- python3 -c 'b = bytearray(320 << 20)' >/dev/null 2>$W/plain-mem.err
echo $? >$W/plain-mem.status
echo "the scope lives on" >$W/plain-alive.out
EOF
chmod 755 $W/plain.sh
as_user $W/plain.sh

version_row() {
	grep '^cgroup' $W/version.out
	want "grep -q '^cgroup  *yes  *.*delegated by systemd: /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/.* (memory pids' $W/version.out" "sbx version: cgroup yes, delegated by systemd (memory pids ...)"
}
check "rootless: sbx version's cgroup row" version_row

# report NAME: the essentials of a report.
report() {
	echo "status $(cat $W/$1.status)"
	head -c 1500 $W/$1.err
	jq -c '{verdict, exit_code, oom_killed, pids_limit_hit, violations: [.violations[]?.rule], left_running: [.processes.left_running[]? | {argv: (.argv | join(" ")), state}], limits: [.limits.enforced[] | "\(.limit)=\(.by)"], notes: [.notes[] | select(test("rootless|limit"))]}' $W/$1.json 2>&1 | head -c 3000
	echo
}
u_memory() {
	report mem
	want "jq -e '.oom_killed == true' $W/mem.json >/dev/null" "oom_killed true" &&
		want "jq -e '.limits.enforced[] | select(.limit == \"memory\" and .by == \"cgroup\")' $W/mem.json >/dev/null" "memory enforced by cgroup" &&
		want "[ \"$(jq -c '[.verdict, .exit_code, .oom_killed]' $W/mem.json)\" = \"$(jq -c '[.verdict, .exit_code, .oom_killed]' $W/root-mem.json)\" ]" "verdict, exit code and oom_killed as root's" &&
		want "[ $(cat $W/mem.status) = $(jq .exit_code $W/root-mem.json) ]" "sbx's status as root's"
}
check "rootless: --memory 64M, 320 MiB allocated: OOM kill reported" u_memory
u_pids() {
	report pids
	want "jq -e '.pids_limit_hit == true' $W/pids.json >/dev/null" "pids_limit_hit true" &&
		want "jq -e '.limits.enforced[] | select(.limit == \"pids\" and .by == \"cgroup\")' $W/pids.json >/dev/null" "pids enforced by cgroup"
}
check "rootless: --pids 20, 60 children: limit hit reported" u_pids
u_freezer() {
	report bg
	want "[ $(cat $W/bg.status) = 100 ]" "exit 100 (violation)" &&
		want "jq -e '[.processes.left_running[].argv | join(\" \")] | index(\"sleep 120\")' $W/bg.json >/dev/null" "sleep 120 in left_running" &&
		want "jq -e '[.notes[] | select(test(\"limits through the cgroup systemd delegates to the caller\"))] | length == 1' $W/bg.json >/dev/null" "the delegation note" &&
		want "jq -e '[.notes[] | select(test(\"SIGSTOP|no freezer\"))] | length == 0' $W/bg.json >/dev/null" "no SIGSTOP note" &&
		want "jq -e '[.notes[] | select(test(\"freezer\"))] | length == 0' $W/bg.json >/dev/null" "observed frozen (no 'no cgroup freezer' note)"
}
check "rootless: a process left running, found through the freezer" u_freezer
u_cpu() {
	report cpu
	echo "cpu.max of the run's cgroup: $(cat $W/cpu.out)"
	if jq -e '.limits.enforced[] | select(.limit == "cpu" and .by == "cgroup")' $W/cpu.json >/dev/null; then
		want "grep -q '^50000 100000' $W/cpu.out" "cpu.max 50000 100000 in the sandbox"
	else
		echo "(no cpu controller delegated: cpu not limited, as the notes say)"
		want "jq -e '[.notes[] | select(test(\"cpu is not limited\"))] | length == 1' $W/cpu.json >/dev/null" "the notes say cpu is not limited"
	fi
}
check "rootless: --cpus 0.5" u_cpu
u_require() {
	echo "status $(cat $W/require.status)"
	cat $W/require.out
	want "[ $(cat $W/require.status) = 0 ]" "limits.require: cgroup satisfied (exit 0)"
}
check "rootless: limits.require: cgroup" u_require
u_left() {
	echo "left after the runs: $(cat $W/left.out)"
	echo "left after a crashed run: $(cat $W/crash-left.out)"
	echo "gc: status $(cat $W/gc.status): $(cat $W/gc.out)"
	echo "left after gc: $(cat $W/gc-left.out)"
	want "[ ! -s $W/left.out ]" "no sbx-* cgroup left after the runs" &&
		want "[ -s $W/crash-left.out ]" "the crashed run left its cgroup (for gc)" &&
		want "[ ! -s $W/gc-left.out ]" "sbx gc removed it"
}
check "rootless: no run's cgroup left; a crashed run's removed by gc" u_left

u_plain() {
	grep '^cgroup' $W/plain-version.out
	report plain-mem
	want "grep -q '^cgroup  *no  *not delegated: .* which is not Delegate=yes' $W/plain-version.out" "sbx version: cgroup no, not Delegate=yes" &&
		want "jq -e '.limits.enforced[] | select(.limit == \"memory\" and .by == \"none\")' $W/plain-mem.json >/dev/null" "memory not limited (rlimits)" &&
		want "[ -s $W/plain-alive.out ]" "the scope outlived the run"
}
check "rootless in a scope without Delegate=yes: rlimits, and why" u_plain

if [ -x /opt/sbx/work/sandbox/sandbox.test ]; then
	go_root() {
		(cd /opt/sbx/work/sandbox && ./sandbox.test -test.run '^TestDelegated|^TestDelegation|^TestRecordedCgroup' -test.count=1 -test.v) >$W/goroot.out 2>&1
		grep -v '^=== ' $W/goroot.out | tail -60
		want "grep -q -- '--- PASS: TestDelegatedRun' $W/goroot.out" "TestDelegatedRun passes as root" &&
			want "! grep -q -- '--- FAIL' $W/goroot.out" "no test fails"
	}
	check "go test: TestDelegatedRun as root (a cgroup it delegates to a user it adds)" go_root
	go_user() {
		as_user_delegated sh -c 'cd /opt/sbx/work/sandbox && ./sandbox.test -test.run "^TestDelegatedRun$" -test.count=1 -test.v' >$W/gouser.out 2>&1
		grep -v '^=== ' $W/gouser.out | tail -40
		want "grep -q -- '--- PASS: TestDelegatedRun' $W/gouser.out" "TestDelegatedRun passes as sbxuser" &&
			want "! grep -q -- '--- SKIP: TestDelegatedRun' $W/gouser.out" "not skipped"
	}
	check "go test: TestDelegatedRun as sbxuser in a Delegate=yes scope" go_user
fi
finish
