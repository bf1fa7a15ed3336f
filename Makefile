# The one entry point: deps, build, test, lint, demo, bench.
GO      ?= go
TAGS    := seccomp
BIN     := bin/sbx
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED := 1

# Debian packages: libseccomp-dev and libc6-dev to build (their static libraries: bin/sbx is static); iproute2 and nftables to inspect state in tests; strace,
# curl, gcc and python3 for the regression battery; bubblewrap, runc and busybox-static for the
# benchmarks and the OCI bundle test (runc and crun); jq for the report-contract test; uidmap and
# passt for sbx without root (newuidmap for maps of more than one id, not used yet: one id is mapped;
# pasta is the network contract's uplink).
DEBS := libseccomp-dev libc6-dev pkg-config iproute2 nftables bubblewrap runc crun busybox-static jq python3 strace curl gcc uidmap passt apparmor

.PHONY: install-systemd all deps build install install-apparmor test test-vm test-vm-smoke test-k8s lint man demo bench soak compat compat-deps toolchains clean
all: build

deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# bin/sbx-init is the supervisor as a small static binary; sbx uses it when it lies next to bin/sbx.
# -w leaves out DWARF (a quarter of the binary, the symbol table stays for perf): without root,
# libcontainer copies the binary into a sealed memfd for every run's init.
# sbx itself is linked statically too (libseccomp and libc in the binary; netgo and osusergo keep Go's
# resolver and user lookups off libc's NSS): every run starts the binary twice, as sbx and as
# libcontainer's init, and the dynamic loader's 0.6 ms each time is gone.
# bin/sbx-mcp is sbx whole, MCP server included; bin/sbx leaves the server out (tag nomcp) and hands
# `sbx mcp` over to bin/sbx-mcp: the MCP SDK's packages cost every run of sbx exec their initialization.
STATIC := -linkmode external -extldflags -static
build: deps
	$(GO) build -tags "$(TAGS) netgo osusergo nomcp" -ldflags "-w -X main.version=$(VERSION) $(STATIC)" -o $(BIN) ./cmd/sbx
	$(GO) build -tags "$(TAGS) netgo osusergo" -ldflags "-w -X main.version=$(VERSION) $(STATIC)" -o $(BIN)-mcp ./cmd/sbx
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)-init ./internal/cmd/sbx-init

# The three binaries side by side (sbx finds sbx-init and sbx-mcp next to itself): make install
# PREFIX=/usr/local puts them in /usr/local/bin.
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(BIN)-mcp $(BIN)-init $(DESTDIR)$(PREFIX)/bin/
	@$(MAKE) --no-print-directory install-apparmor install-systemd

# The units of sbx serve (contrib/systemd): root's (system) and every user's (user), socket-activated,
# for the binaries in $(PREFIX)/bin. Installed, not enabled: systemctl enable --now sbx.socket (root),
# systemctl --user enable --now sbx.socket (a user).
SYSTEMD_D := /etc/systemd
install-systemd:
	@for kind in system user; do \
		install -d $(DESTDIR)$(SYSTEMD_D)/$$kind && \
		for u in sbx.socket sbx.service; do \
			sed 's|@PREFIX@|$(PREFIX)|g' contrib/systemd/$$kind/$$u > $(DESTDIR)$(SYSTEMD_D)/$$kind/$$u && \
			chmod 0644 $(DESTDIR)$(SYSTEMD_D)/$$kind/$$u || exit 1; \
		done; \
	done; echo "installed sbx.socket and sbx.service in $(DESTDIR)$(SYSTEMD_D)/system and /user (not enabled)"
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

# sbx's AppArmor profile (contrib/apparmor/sbx) for the binaries in $(PREFIX)/bin, into
# /etc/apparmor.d/sbx, loaded at once: where kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu
# 24.04 and later) a program without a profile that grants userns gets no capabilities in its user
# namespaces, and sbx without root could build no sandbox. Only where AppArmor is active and its parser
# knows the profile's ABI 4.0 (apparmor 4, the first with the userns rule; Debian 12's 3.0 has neither
# the rule nor a kernel with the restriction); elsewhere it says so and does nothing. With DESTDIR (a
# package's tree) the file is installed, not loaded. The profiles attach by path: PREFIX=$PWD covers
# a checkout's bin/. (apparmor is in DEBS for apparmor_parser: sandbox's test parses the profile.)
APPARMOR_D := /etc/apparmor.d
install-apparmor:
	@if [ ! -d /sys/kernel/security/apparmor ] || ! command -v apparmor_parser >/dev/null; then \
		echo "AppArmor is not active here (no /sys/kernel/security/apparmor or no apparmor_parser): no profile installed"; \
	elif [ ! -e $(APPARMOR_D)/abi/4.0 ]; then \
		echo "this apparmor_parser predates ABI 4.0 (no $(APPARMOR_D)/abi/4.0), which sbx's profile needs for userns: no profile installed"; \
	else \
		tmp=$$(mktemp) && sed 's|^@{PREFIX}=.*|@{PREFIX}=$(PREFIX)|' contrib/apparmor/sbx > $$tmp && \
		install -d $(DESTDIR)$(APPARMOR_D) && install -m 0644 $$tmp $(DESTDIR)$(APPARMOR_D)/sbx && rm -f $$tmp && \
		if [ -z "$(DESTDIR)" ]; then apparmor_parser -r $(APPARMOR_D)/sbx && echo "loaded $(APPARMOR_D)/sbx for $(PREFIX)/bin"; fi; \
	fi

# -p 1: packages one at a time. Their tests change host state that is shared on purpose (the host NAT
# table and ip_forward of host-uplink runs) and check that it is restored, which another package's test
# running at the same time would disturb. Within a package, tests still run in parallel.
# Then the packages that build and observe sandboxes at once (a pool's refill beside a run, the
# collectors' goroutines) again under the race detector, whose builds run slower: their waits are stretched.
RACE_PKGS := ./runner ./sandbox/... ./observe
test: deps
	$(GO) test -tags $(TAGS) -count=1 -p 1 ./...
	SBX_TEST_TIME_SCALE=$${SBX_TEST_TIME_SCALE:-4} $(GO) test -race -tags $(TAGS) -count=1 -p 1 $(RACE_PKGS)

# The tests in a Debian 12 VM (systemd, cgroup v2, Debian's stock kernels) under qemu: vm/image.sh
# builds the image once (cached in $(SBX_VM_CACHE), keyed on the script), vm/run.sh boots it with no
# network device and runs a job from vm/jobs. test-vm: the whole suite (every package's test binary, as
# root, then sbx as an ordinary user in its delegated cgroup) on KERNEL: 6.1 (default), 6.12, or all
# (6.1, 6.12, then 5.10, where sbx must refuse: no Landlock). test-vm-smoke: the CI subset on 6.1 and
# 6.12, and the refusal on 5.10. TCG, slow: SBX_VM_ACCEL=kvm where KVM boots Debian's kernels.
KERNEL       ?= 6.1
SBX_VM_CACHE ?= /var/cache/sbx-vm
export SBX_VM_CACHE
test-vm: build
	vm/payload.sh $(SBX_VM_CACHE)/payload --tests
	@ks="$(KERNEL)"; [ "$$ks" = all ] && ks="6.1 6.12 5.10"; st=0; t=$$(date +%s); \
	for k in $$ks; do \
		if [ $$k = 5.10 ]; then vm/run.sh $$k vm/jobs/smoke.sh || st=1; \
		else SBX_VM_TIMEOUT=$${SBX_VM_TIMEOUT:-14400} vm/run.sh $$k vm/jobs/suite.sh $(SBX_VM_CACHE)/payload || st=1; fi; \
	done; echo "test-vm: $$(( $$(date +%s) - t )) s"; exit $$st

test-vm-smoke: build
	@st=0; t=$$(date +%s); for k in 6.1 6.12 5.10; do vm/run.sh $$k vm/jobs/smoke.sh || st=1; done; \
	echo "test-vm-smoke: $$(( $$(date +%s) - t )) s"; exit $$st

# Kubernetes' own code on every export of every built-in profile: strict decoding into k8s.io/api,
# Cilium's and agent-sandbox's types, and the API server's validation. A module of its own
# (export/k8stest) so that k8s.io/kubernetes stays out of sbx's dependencies; not part of make test.
# KUBE_DRYRUN=1 also builds kube-apiserver and kubectl from the module proxy (several minutes), runs them
# with Debian's etcd on loopback and applies every export with --dry-run=server --validate=strict.
K8S_DIR := export/k8stest
test-k8s:
ifeq ($(KUBE_DRYRUN),1)
	@dpkg -s etcd-server >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null)
	cd $(K8S_DIR) && $(GO) build -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver && $(GO) build -o bin/kubectl k8s.io/kubernetes/cmd/kubectl
	cd $(K8S_DIR) && KUBE_APISERVER=$$PWD/bin/kube-apiserver KUBECTL=$$PWD/bin/kubectl $(GO) test -count=1 ./...
else
	cd $(K8S_DIR) && $(GO) test -count=1 ./...
endif

# Man pages (section 1) from the commands' help text, into man/.
man: build
	./$(BIN) man -o man

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	@# The report format, the profile format and the exports must stay importable without cgo (no libseccomp).
	CGO_ENABLED=0 $(GO) build ./report/... ./policy/... ./export
	$(GO) vet -tags $(TAGS) ./...
	$(GO) vet -tags "$(TAGS) nomcp" ./cmd/sbx
	$(GO) tool staticcheck -tags $(TAGS) ./...

# The classic case: a command that exits 0 after leaving a listener and a nohup'd child behind.
demo: build
	@./$(BIN) exec -- sh -c 'nohup sleep 300 >/dev/null 2>&1 & python3 -m http.server 8765 >/dev/null 2>&1 & exit 0'; \
		echo "sbx exit status: $$? (100: violation)"

# Whole runs side by side with runc and bwrap (and a warm sbx_run through sbx mcp, timed as its MCP
# client), 20 runs at once (cold, through the warm pool, runc, bwrap), then the after-snapshot with 20
# sandbox processes, alone and with 500 idle host processes present, then the network contract's setup
# alone, Compare over 400k records, and a flood of a million DNS queries from a sandbox (peak RSS,
# observe time).
bench: build
	$(GO) run -tags $(TAGS) ./internal/cmd/bench -sbx $(BIN)
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'Snapshot$$|SnapshotBusyHost' -benchtime 200x ./observe
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'SetupClose|NoneRecord' -benchtime 100x ./sandbox/netcontract
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'CompareFlood' -benchtime 3x ./policy
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'DNSFlood' -benchtime 1x -timeout 20m ./sandbox/netcontract
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'WritableLayer' -benchtime 100x ./sandbox/rootfs
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'LayerRecreate' -benchtime 1x -timeout 20m ./sandbox/rootfs
	@# sbx's recorder under hostile floods at --cpus 0.1 (long link walks, plain refused opens): its worst
	@# case per notification (worst_us, worst_cpu_us) and its CPU (cpu_ms) against the sandbox's (sandbox_cpu_ms)
	$(GO) test -tags $(TAGS) -count=1 -v -run 'TestBattery/bad_recorder_cost$$' ./cmd/sbx | grep '"notifications"'

# Long: 200 runs of bin/sbx in a row and 20 at once, then a check that no process, mount, cgroup,
# namespace, link, nft table or state dir is left. Kept out of `make test`.
soak: build
	$(GO) run -tags $(TAGS) ./internal/cmd/soak -sbx $(BIN)

# Corpora of others' tests on the host and in `sbx exec` (CPython's suite, Go's standard library, a
# file-heavy one; internal/cmd/compat): prints the cases that fail only in sbx with their reason
# (testdata/compat/known.txt), fails on an undocumented one and past 1.5x the host's time on the
# file-heavy corpus. Takes many minutes; kept out of `make test`.
# The corpora's tools: CPython's suite and its interpreter; the file corpus's archivers, rsync, git and a
# compiler (Go's corpus uses the go on PATH, and is left out without one).
COMPAT_DEBS := libpython3.11-testsuite python3.11 zstd xz-utils rsync git make gcc e2fsprogs
compat-deps:
	@missing=""; for p in $(COMPAT_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

compat: build compat-deps
	$(GO) run ./internal/cmd/compat -sbx $(BIN) -known testdata/compat/known.txt

# Builds with warm caches on the host and in sbx (filesystem.toolchains): go build of a module with
# dependencies, npm ci --offline, pip install from the pip cache, cargo build --offline, an offline Maven
# validate from the local repository, each the median of RUNS (5) runs, with the ratio sbx/host (target:
# within 1.5x). A toolchain that is not installed is left out. No network; the caches are made in a
# scratch HOME (Go's are the caller's).
toolchains: build
	SBX=$(BIN) sh testdata/toolchains/bench.sh

clean:
	rm -rf bin man
