#!/bin/sh
# make toolchains: each toolchain's build with warm caches, on the host and inside sbx
# (--toolchains), RUNS times each; prints the medians, what sbx adds and their ratio (the target: within
# 1.5x; on builds this small, sbx's own start and observation, tens of ms, weigh most). No
# network: Go builds from the caller's module cache (the modules sbx itself needs, go.sum from sbx's
# checkout), npm, pip and cargo from caches made here from local files, in a scratch HOME.
set -eu
SBX=$(readlink -f "${SBX:-bin/sbx}")
RUNS=${RUNS:-5}
SUM=$(readlink -f go.sum)
T=$(mktemp -d /var/tmp/sbx-toolchains-XXXXXX)
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOTELEMETRY=off npm_config_update_notifier=false
command -v go >/dev/null && export GOMODCACHE="$(go env GOMODCACHE)" GOCACHE="$(go env GOCACHE)"
export HOME="$T/home" XDG_CACHE_HOME= npm_config_cache= PIP_CACHE_DIR= CARGO_HOME=
mkdir -p "$HOME"
pass="-e GOFLAGS -e GOPROXY -e GOSUMDB -e GOTOOLCHAIN -e GOTELEMETRY -e npm_config_update_notifier"

# median of the wall times (seconds) of RUNS runs of "$@", after one untimed run that warms
median() {
	"$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; "$@" >&2 || true; return 1; }
	i=0; while [ $i -lt "$RUNS" ]; do
		s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N)
		echo $(( (e - s) / 1000000 )); i=$((i + 1))
	done | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]/1000}'
}

report() { # name host-seconds sbx-seconds
	awk -v n="$1" -v h="$2" -v s="$3" 'BEGIN {printf "%-6s host %7.3f s   sbx %7.3f s   %+5d ms   ratio %.2f%s\n", n, h, s, (s-h)*1000, s/h, (s/h > 1.5 ? "   (over 1.5x)" : "")}'
}

# Go: a module with two dependencies; each build recompiles the main package (a new constant) and links.
if command -v go >/dev/null; then
	mkdir "$T/go" && cd "$T/go"
	printf 'module example.com/bench\n\ngo 1.22\n\nrequire (\n\tgo.yaml.in/yaml/v3 v3.0.6\n\tgolang.org/x/sys v0.50.0\n)\n' > go.mod
	grep -E '^(go.yaml.in/yaml/v3 v3.0.6|golang.org/x/sys v0.50.0)' "$SUM" > go.sum
	cat > build.sh <<'GO'
printf 'package main\n\nimport (\n\t"fmt"\n\n\t"go.yaml.in/yaml/v3"\n\t"golang.org/x/sys/unix"\n)\n\nconst n = %s\n\nfunc main() { b, _ := yaml.Marshal(map[string]int{"pid": unix.Getpid(), "n": n}); fmt.Print(string(b)) }\n' "$(date +%s%N)" > main.go
go build -o bench .
GO
	report go "$(median sh build.sh)" "$(median "$SBX" exec -q --toolchains go $pass -- sh build.sh)"
fi

# npm: npm ci --offline of a project with one dependency, from the npm cache.
if command -v npm >/dev/null; then
	mkdir -p "$T/npm/dep" "$T/npm/app" && cd "$T/npm/dep"
	printf '{"name":"tinydep","version":"1.0.0","main":"index.js"}' > package.json && echo 'module.exports = 42' > index.js
	npm pack -q >/dev/null && npm cache add ./tinydep-1.0.0.tgz >/dev/null 2>&1
	i="sha512-$(openssl dgst -sha512 -binary tinydep-1.0.0.tgz | base64 -w0)"
	cd "$T/npm/app"
	printf '{"name":"app","version":"1.0.0","dependencies":{"tinydep":"1.0.0"}}' > package.json
	printf '{"name":"app","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{"":{"name":"app","version":"1.0.0","dependencies":{"tinydep":"1.0.0"}},"node_modules/tinydep":{"version":"1.0.0","resolved":"https://registry.npmjs.org/tinydep/-/tinydep-1.0.0.tgz","integrity":"%s"}}}' "$i" > package-lock.json
	ci="npm ci --offline --no-audit --no-fund"
	report npm "$(median sh -c "$ci")" "$(median "$SBX" exec -q --toolchains npm $pass -- sh -c "$ci")"
fi

# pip: pip install of a wheel from the pip cache's wheels (--no-index), into a target directory.
# The system's python3 (/usr/bin): one under the home (pyenv's shims) is hidden in the sandbox.
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if $PY -m pip --version >/dev/null 2>&1; then
	w="$HOME/.cache/pip/wheels/ab/cd" && mkdir -p "$w" "$T/pip" && cd "$T/pip"
	$PY - "$w" <<'PY'
import base64, hashlib, os, sys, zipfile
files = {"tinypkg/__init__.py": "ANSWER = 42\n",
         "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
         "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
rec = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode(), len(t)) for n, t in files.items()]
files["tinypkg-1.0.dist-info/RECORD"] = "\n".join(rec + ["tinypkg-1.0.dist-info/RECORD,,"]) + "\n"
with zipfile.ZipFile(os.path.join(sys.argv[1], "tinypkg-1.0-py3-none-any.whl"), "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
PY
	inst="rm -rf site && $PY -m pip install -q --disable-pip-version-check --no-index --find-links $w --target site tinypkg"
	report pip "$(median sh -c "$inst")" "$(median "$SBX" exec -q --toolchains pip $pass -- sh -c "$inst")"
fi

# cargo: cargo build --offline of a crate with a path dependency; each build recompiles the crate.
if command -v cargo >/dev/null; then
	bin=$(dirname "$(command -v cargo)")
	[ -d "$(dirname "$bin")/../.rustup" ] && export RUSTUP_HOME="$(cd "$(dirname "$bin")/../.rustup" && pwd)"
	mkdir -p "$T/cargo/src" "$T/cargo/dep/src" "$HOME/.cargo" && cd "$T/cargo"
	printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\ndep = { path = "dep" }\n' > Cargo.toml
	printf '[package]\nname = "dep"\nversion = "0.1.0"\nedition = "2021"\n' > dep/Cargo.toml
	echo 'pub fn answer() -> i32 { 42 }' > dep/src/lib.rs
	echo 'printf "const N: u64 = %s;\nfn main() { println!(\"{} {}\", N, dep::answer()); }\n" "$(date +%s%N)" > src/main.rs && cargo build -q --offline' > build.sh
	report cargo "$(median sh build.sh)" "$(median "$SBX" exec -q --toolchains cargo --ro "$bin" $pass -- sh build.sh)"
fi

# Maven: an offline validate of a project whose parent POM is only in the local repository (no plugin is
# needed, so none need be in the cache): Maven's start, its reading of the repository, and the JVM's.
# On the host as in the sandbox, maven.repo.local names the scratch HOME's repository (Maven takes
# user.home from the passwd entry).
if command -v mvn >/dev/null; then
	r="$HOME/.m2/repository/com/example/parent/1.0" && mkdir -p "$r" "$T/mvn" && cd "$T/mvn"
	printf '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><groupId>com.example</groupId><artifactId>parent</artifactId><version>1.0</version><packaging>pom</packaging></project>\n' > "$r/parent-1.0.pom"
	printf '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><parent><groupId>com.example</groupId><artifactId>parent</artifactId><version>1.0</version><relativePath/></parent><artifactId>app</artifactId><packaging>pom</packaging></project>\n' > pom.xml
	mv="mvn -B -o -q -Dstyle.color=never validate"
	report maven "$(median env MAVEN_OPTS=-Dmaven.repo.local=$HOME/.m2/repository sh -c "$mv")" "$(median "$SBX" exec -q --toolchains maven $pass -- sh -c "$mv")"
fi
