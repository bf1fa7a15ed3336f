#!/usr/bin/env bash
# vm/payload.sh DIR [--tests]: lays out in DIR what a VM job gets (the guest copies it to /opt/sbx/work
# and runs job.sh there): bin/ from make build, and with --tests the repository's tracked files with
# their layout (tests open testdata/ and other files by paths relative to their package's directory)
# and every package's test binary as PKG/PKG.test beside its sources, built here on the host.
#
# The guest has no Go toolchain: the few tests that call `go` (TestStaticInit, TestSeccompKeyBuild,
# cmd/sbx's buildSbx tests) skip themselves without one.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1 tests=${2:-}
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
start=$(date +%s)
rm -rf "$dir" && mkdir -p "$dir"
cp -a bin "$dir/"
mkdir -p "$dir/contrib" && cp -a contrib/systemd "$dir/contrib/" # sbx serve's units, for the smoke's check
if [ "$tests" = --tests ]; then
	# The work tree as it is (uncommitted changes included: it is what make build built). Only the
	# tests need it: the guest copies the payload off 9p, slowly (a minute or more under TCG).
	git ls-files -z | xargs -0 cp --parents -t "$dir" 2>/dev/null || true
	: >"$dir/tests.list"
	for pkg in $(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' ./...); do
		rel=${pkg#"$PWD"/}
		echo "$rel/$(basename "$rel").test" >>"$dir/tests.list"
		# The same tags as make test; two packages at a time on this 2-core host.
		go test -c -tags seccomp -o "$dir/$rel/$(basename "$rel").test" "./$rel" &
		while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
	done
	wait
	while read -r t; do [ -x "$dir/$t" ] || { echo "vm payload: $t did not build" >&2; exit 1; }; done <"$dir/tests.list"
	echo "vm payload: $(wc -l <"$dir/tests.list") test binaries" >&2
fi
echo "vm payload: $dir in $(($(date +%s) - start)) s ($(du -sh "$dir" | cut -f1))" >&2
