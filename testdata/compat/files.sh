#!/bin/sh
# The file-heavy corpus of make compat (internal/cmd/compat): everyday work on many files, run from an
# empty directory on the host and in `sbx exec`, case by case. Each case prints one line,
# "case NAME STATUS MS DIGEST": its exit status, its wall time and a digest of what it printed, which
# must match between the two sides. FILES (default 100000) is the size of the tree.
set -u
N=${FILES:-100000}
# No automatic gc in the background: it would outlive its case (and the sandbox's run).
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=gc.autoDetach GIT_CONFIG_VALUE_0=false

run() { # run NAME FUNC: one case
	t0=$(date +%s%N)
	out=$("$2" 2>"err-$1")
	st=$?
	t1=$(date +%s%N)
	echo "case $1 $st $(((t1 - t0) / 1000000)) $(printf '%s' "$out" | md5sum | cut -c1-12)"
	[ $st = 0 ] || sed 's/^/  | /' "err-$1" | head -5
	rm -f "err-$1"
}

count() { find "$@" -type f | wc -l; }

# N files of a few bytes, 1,000 to a directory, and a second tree of 200 C files
create() {
	python3 - "$N" <<'PY'
import os, sys
n = int(sys.argv[1])
for i in range(n):
    d = "tree/d%d" % (i // 1000)
    if i % 1000 == 0:
        os.makedirs(d)
    with open("%s/f%d" % (d, i), "w") as f:
        f.write("%d\n" % i)
PY
	count tree
}
copy() { cp -a tree copy && count copy; }
walk() { find tree -name 'f*7' | wc -l && du -s --inodes tree | cut -f1 && ls -R tree | wc -l; }
remove() { rm -rf copy && echo removed; }
# create after delete: the same copy again where the last one was removed
copy_again() { cp -a tree copy && count copy && rm -rf copy; }
sync() {
	command -v rsync >/dev/null || { echo "no rsync"; return 0; }
	rsync -a tree/ synced/ && count synced && rm -rf synced
}
archive() {
	tar -cf - tree | zstd -q -T2 -o t.tar.zst && mkdir x && zstd -qdc t.tar.zst | tar -C x -xf - && count x &&
		tar -cJf small.txz tree/d1 && tar -tJf small.txz | wc -l && rm -rf x t.tar.zst small.txz
}
links() { cp -al tree hard && stat -c %h tree/d0/f0 hard/d0/f0 && count hard && rm -rf hard; }
repo() {
	# a tenth of the tree (at least a directory) in a repository of its own
	git init -q g && for d in $(ls tree | sort -V | head -$((N / 10000 + 1))); do cp -a "tree/$d" g/; done &&
		git -C g add -A && git -C g -c user.name=c -c user.email=c@example.org commit -q -m all &&
		echo change >> g/d0/f0 && git -C g status --porcelain && git -C g stash -q && git -C g gc -q &&
		git clone -q --local g g2 && git clone -q --no-local g g3 && git -C g2 log --oneline | wc -l &&
		count g3 -not -path '*/.git/*' && rm -rf g g2 g3
}
build() {
	mkdir -p src && i=0 && while [ $i -lt 200 ]; do printf 'int f%d(void){return %d;}\n' $i $i > src/f$i.c; i=$((i + 1)); done &&
		printf 'int main(void){return 0;}\n' > src/main.c &&
		printf 'O := $(patsubst src/%%.c,obj/%%.o,$(wildcard src/*.c))\nprog: $(O)\n\tgcc -o $@ $^\nobj/%%.o: src/%%.c | obj\n\tgcc -c -o $@ $<\nobj:\n\tmkdir -p obj\n' > Makefile &&
		make -s -j4 && ./prog && ls obj | wc -l && make -s clean 2>/dev/null; rm -rf obj prog && make -s -j4 && ls obj | wc -l
}
cleanup() { rm -rf tree src obj prog Makefile && ls | wc -l; }

run create create
run copy copy
run walk walk
run remove remove
run copy-again copy_again
run rsync sync
run archive archive
run links links
run git repo
run build build
run cleanup cleanup
