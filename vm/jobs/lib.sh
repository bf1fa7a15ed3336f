# Sourced by the VM jobs (they run as root in /opt/sbx/work, the payload's copy; see vm/run.sh).
#
# check [--soft] NAME FUNC [ARG...]: runs FUNC with its output to a file, prints "PASS NAME (Ns)" or
# "FAIL NAME (Ns)" and then the output, indented. A --soft check's failure prints "SOFT-FAIL" and does
# not fail the job (checks of work still landing); SBX_VM_STRICT_ROOTLESS=1 makes them strict.
# finish: the "N passed, N failed" line, and the job's exit status (1 if a strict check failed).
SBX=/opt/sbx/work/bin/sbx
OUT=${SBX_VM_OUT:-/tmp}
npass=0 nfail=0 nsoft=0
failed_names=""

check() {
	local soft=
	if [ "$1" = --soft ]; then
		soft=1
		shift
		[ "${SBX_VM_STRICT_ROOTLESS:-0}" = 1 ] && soft=
	fi
	local name=$1 t=$SECONDS log
	shift
	log=$(mktemp /opt/sbx/check.XXXXXX)
	if "$@" >"$log" 2>&1; then
		echo "PASS $name ($((SECONDS - t)) s)"
		npass=$((npass + 1))
		[ -n "${VERBOSE:-}" ] && sed 's/^/    /' "$log"
	elif [ -n "$soft" ]; then
		echo "SOFT-FAIL $name ($((SECONDS - t)) s) [expected to pass once rootless delegation lands; SBX_VM_STRICT_ROOTLESS=1 makes it strict]"
		nsoft=$((nsoft + 1))
		sed 's/^/    /' "$log" | tail -40
	else
		echo "FAIL $name ($((SECONDS - t)) s)"
		nfail=$((nfail + 1))
		failed_names="$failed_names $name"
		sed 's/^/    /' "$log" | tail -60
	fi
	rm -f "$log"
}

# want COND MESSAGE: fails the calling check with MESSAGE when the test COND ([ ... ] as a string) is false.
want() {
	if ! eval "$1"; then
		echo "want: $2"
		return 1
	fi
}

finish() {
	[ -n "$failed_names" ] && echo "failed:$failed_names"
	[ "$nsoft" -gt 0 ] && echo "soft-failed (not counted): $nsoft"
	# The plain closing line CI's log reader knows.
	echo "checks: $npass passed, $nfail failed"
	[ "$nfail" -eq 0 ]
}

# as_user CMD...: runs CMD as sbxuser inside a transient scope of its systemd user manager with
# Delegate=yes, so that the command has a cgroup delegated to the user
# (user@1000.service/app.slice/run-*.scope), as `systemd-run --user --scope -p Delegate=yes sbx ...`
# gives it: lingering (set in the image) started user@1000.service at boot.
as_user() {
	setpriv --reuid=1000 --regid=1000 --init-groups --reset-env -- \
		env HOME=/home/sbxuser USER=sbxuser LOGNAME=sbxuser PATH=/opt/sbx/work/bin:/usr/bin:/bin \
		XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus \
		sh -c 'cd /home/sbxuser && exec systemd-run --user --scope -p Delegate=yes --quiet -- "$@"' as_user "$@"
}
