# The whole suite in the VM (vm/run.sh KERNEL vm/jobs/suite.sh PAYLOAD, PAYLOAD from
# vm/payload.sh --tests): every package's test binary as root, one package at a time as make test runs
# them (-p 1), each from its package's directory; then sbx without root as sbxuser in its delegated
# cgroup. Full logs: out/tests/PKG.log (vm/run.sh copies out/ to the host's logs dir).
# SBX_VM_PKGS, when set, keeps only the packages whose tests.list line matches it (an ERE, e.g.
# '^cmd/sbx/'; default: all), to iterate on a few packages.
. ./lib.sh
set -u
# TCG runs 5-20x slower than the host: a generous per-package timeout (SBX_VM_TEST_TIMEOUT).
tmo=${SBX_VM_TEST_TIMEOUT:-90m}
mkdir -p "$OUT/tests"
summary=""
while read -r t; do
	pkg=$(dirname "$t")
	log=$OUT/tests/$(echo "$pkg" | tr / _).log
	start=$SECONDS
	echo "=== $pkg"
	(cd "/opt/sbx/work/$pkg" && "./$(basename "$t")" -test.v=false -test.timeout "$tmo" ${SBX_VM_TEST_RUN:+-test.run "$SBX_VM_TEST_RUN"}) >"$log" 2>&1
	st=$?
	if [ $st = 0 ]; then
		line="ok   $pkg $((SECONDS - start)) s"
		npass=$((npass + 1))
	else
		line="FAIL $pkg $((SECONDS - start)) s (status $st)"
		nfail=$((nfail + 1))
		failed_names="$failed_names $pkg"
		# The failures' own lines: --- FAIL and what the test printed, bounded.
		grep -v '^\s*=== \(RUN\|PAUSE\|CONT\)' "$log" | head -200 | sed 's/^/    /'
	fi
	echo "$line"
	summary="$summary$line
"
done < <(grep -E "${SBX_VM_PKGS:-.}" tests.list)
echo "--- packages:"
printf %s "$summary"

# Without root: sbxuser in a scope of its user manager (delegated cgroup: memory and pids enabled).
W=/opt/sbx/suite
rm -rf $W && mkdir -p $W
echo "--- rootless ($(as_user cat /proc/self/cgroup))"
ujson() { # ujson NAME ARGS...: sbx exec -q --json - ARGS as sbxuser; report in $W/NAME.json
	local name=$1
	shift
	timeout 600 as_user "$SBX" exec -q --json - "$@" >"$W/$name.json" 2>"$W/$name.err" </dev/null
	echo "status $?"
	head -c 2000 "$W/$name.err"
	jq -c '{verdict, exit_code, oom_killed, pids_limit_hit, violations: [.violations[]?.rule], limits, notes}' "$W/$name.json" 2>&1 | head -c 2000
}
u_plain() {
	ujson plain -- sh -c 'echo hello; id -u'
	want "jq -e '.verdict == \"pass\" and .exit_code == 0' $W/plain.json >/dev/null" "pass, exit 0"
}
u_memory() {
	ujson memory --memory 64M -- python3 -c 'b = b"x" * (320 << 20)'
	want "jq -e '.oom_killed == true' $W/memory.json >/dev/null" "oom_killed true"
}
u_pids() {
	ujson pids --pids 16 -- sh -c 'for i in $(seq 40); do sleep 3 & done; wait'
	want "jq -e '.pids_limit_hit == true' $W/pids.json >/dev/null" "pids_limit_hit true"
}
check "rootless exec: plain run" u_plain
check "rootless exec: --memory 64M, 320 MiB allocated: OOM" u_memory
check "rootless exec: --pids 16, 40 children: limit hit" u_pids
finish
