# Everyday tools, each printing only what must match between the host and the sandbox (compat_tools.txtar
# runs it in both, as root and without root). Run from an empty directory of its own; a tool that is
# missing prints "no TOOL" on both sides alike.
set -u
have() { command -v "$1" >/dev/null 2>&1 || { echo "no $1"; return 1; }; }
step() { echo "== $1"; }

step sqlite
have sqlite3 && sqlite3 t.db 'create table t(a); insert into t values (1), (2); pragma journal_mode=wal; insert into t values (3); select sum(a) from t;'

step in-place
printf 'a\nb\n' > f
sed -i s/a/x/ f && perl -pi -e s/b/y/ f && perl -i.bak -pe s/x/z/ f && cat f f.bak
ln -s f lf && sed -i --follow-symlinks s/z/w/ lf && test -L lf && cat f
have ed && printf '1s/w/v/\nw\nq\n' | ed -s f && cat f
have vim && vim -es -c '%s/v/u/' -c wq f && cat f

step find-xargs
mkdir -p d/e && for i in $(seq 1 40); do echo $i > d/e/f$i; done
find d -type f -exec cat {} + | sort -n | tail -1
find d -type f -print0 | xargs -0 -P 8 -n 3 cat | wc -l
find d -name 'f1*' | sort | head -3

step sort
seq 1 200000 | sort -R --random-source=/dev/zero > in && sort -S 64K -n in | md5sum && TMPDIR=. sort -S 64K -rn in | head -1

step links
echo a > l1 && ln l1 l2 && ln -s l1 l3 && ln -s /nonexistent l4
stat -c '%h %F' l1 l2 l3 && readlink l3 l4 && cp -al d d2 && ls d2/e | wc -l

step attrs
echo a > m && chmod 640 m && stat -c %a m
touch -d '2020-01-02 03:04:05 UTC' m && TZ=UTC stat -c %y m
python3 -c 'import os; os.utime("m", (1, 2)); print(os.stat("m").st_mtime)'
mkdir s && chmod 1777 s && stat -c %a s

step fifo-sockets
mkfifo p && (echo via-fifo > p &) && cat p
python3 -c '
import os, socket, tempfile
for path in ("s.sock", os.path.join(tempfile.mkdtemp(), "s.sock")):
    s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen()
    c = socket.socket(socket.AF_UNIX); c.connect(path); a, _ = s.accept(); c.send(b"x")
    print("unix", a.recv(1).decode()); os.unlink(path)
'

step flock
flock l -c 'echo locked'
(flock -x 9; sleep 0.3) 9>l2 & sleep 0.1; flock -n l2 -c true; echo busy $?; wait; flock -n l2 -c true; echo free $?

step background
nohup sh -c 'echo nohup > o1' >/dev/null 2>&1 &
setsid sh -c 'echo setsid > o2' &
bash -c 'sleep 0.1 & disown; echo disowned'
wait; sleep 0.3; cat o1 o2

step pty
have script && script -qc 'tty >/dev/null && echo pty; stty size' /dev/null < /dev/null | tr -d '\r'

step dates
TZ=America/New_York date -d @0
git init -q r && git -C r -c user.name=a -c user.email=a@example.org commit -q --allow-empty -m m --date=@1700000000 && TZ=UTC git -C r log --format=%ad

step python
cat > mp.py <<'PY'
import multiprocessing as mp, os, shutil, tempfile
def sq(x): return x * x
if __name__ == "__main__":
    for m in ("fork", "spawn", "forkserver"):
        with mp.get_context(m).Pool(2) as p: print(m, sum(p.map(sq, range(50))))
    from multiprocessing import shared_memory
    s = shared_memory.SharedMemory(create=True, size=1 << 20); s.buf[0] = 7; print("shm", s.buf[0]); s.close(); s.unlink()
    t = tempfile.mkdtemp(); os.makedirs("pa/b"); open("pa/b/f", "w").write("1"); os.symlink("b/f", "pa/l")
    shutil.copytree("pa", os.path.join(t, "c"), symlinks=True); shutil.copytree(os.path.join(t, "c"), "pb")
    print(sorted(os.listdir("pb")), open("pb/l").read()); shutil.rmtree(t)
    os.replace("pb/b/f", "pb/g"); print("replace", os.path.exists("pb/g"))
PY
timeout 60 python3 mp.py

step node
have node && node -e '
const fs = require("fs"), cp = require("child_process");
fs.mkdirSync("nd/e", {recursive: true}); fs.writeFileSync("nd/e/f", "x"); fs.symlinkSync("e/f", "nd/l");
console.log(fs.readFileSync("nd/l", "utf8"), cp.execSync("echo sync").toString().trim(), cp.spawnSync("sh", ["-c", "exit 3"]).status);
fs.cpSync("nd", "nd2", {recursive: true}); console.log(fs.readdirSync("nd2").sort().join(","));
'

step java
have java && cat > J.java <<'JAVA' && java -XX:-UsePerfData J.java
import java.nio.file.*;
public class J {
    public static void main(String[] a) throws Exception {
        Files.createDirectories(Paths.get("jd/e"));
        Files.writeString(Paths.get("jd/e/f"), "x");
        Files.createSymbolicLink(Paths.get("jd/l"), Paths.get("e/f"));
        Process p = new ProcessBuilder("sh", "-c", "echo child; exit 4").start();
        System.out.println(Files.readString(Paths.get("jd/l")) + " " + new String(p.getInputStream().readAllBytes()).trim() + " " + p.waitFor());
        Path t = Files.createTempFile("x", ".y");
        System.out.println(Files.exists(t) + " " + Files.isWritable(Paths.get(System.getProperty("user.home"))));
        Files.delete(t);
        var ss = new java.net.ServerSocket(0, 5, java.net.InetAddress.getLoopbackAddress());
        new java.net.Socket(java.net.InetAddress.getLoopbackAddress(), ss.getLocalPort()).close();
        ss.accept().close();
        System.out.println("loopback " + java.net.InetAddress.getLocalHost().getHostName().isEmpty());
    }
}
JAVA

step archives
mkdir z && seq 1 20000 > z/a && echo b > z/b && ln -s a z/l
have zip && zip -qry z.zip z && unzip -qo z.zip -d u && ls u/z | tr '\n' ' ' && echo
gzip -k z/a && gunzip -c z/a.gz | md5sum
have xz && xz -T2 -k z/a && xz -dc z/a.xz | md5sum
have zstd && zstd -q -k z/a && zstd -qdc z/a.zst | md5sum
tar -cJf z.txz z && tar -tJf z.txz | sort | tr '\n' ' ' && echo

step patch
printf 'a\nb\nc\n' > p1 && printf 'a\nB\nc\n' > p2; diff -u p1 p2 > p.diff; echo diff $?
patch -s p1 < p.diff && cat p1 && patch -s -R p1 < p.diff && cat p1

step make
mkdir -p src && for i in $(seq 1 60); do printf 'int f%d(void){return %d;}\n' $i $i > src/f$i.c; done
printf 'int main(void){return 0;}\n' > src/main.c
printf 'O := $(patsubst src/%%.c,obj/%%.o,$(wildcard src/*.c))\nprog: $(O)\n\tgcc -o $@ $^\nobj/%%.o: src/%%.c | obj\n\tgcc -c -o $@ $<\nobj:\n\tmkdir -p obj\n' > Makefile
make -s -j16 && ./prog && ls obj | wc -l

step keys
have ssh-keygen && ssh-keygen -q -t ed25519 -N '' -C c -f key && ssh-keygen -lf key.pub | cut -d' ' -f1,4
have gpg && mkdir -m 700 gh && GNUPGHOME=$PWD/gh gpg --batch --quiet --pinentry-mode loopback --passphrase '' --quick-gen-key 'T <t@example.org>' ed25519 sign 0 2>/dev/null && echo hello > msg && GNUPGHOME=$PWD/gh gpg --batch -q -a --sign msg && GNUPGHOME=$PWD/gh gpg --batch -q --verify msg.asc 2>&1 | grep -c 'Good signature'; have gpgconf && GNUPGHOME=$PWD/gh gpgconf --kill all

step self
gcc -x c -o self - <<'C'
#include <stdio.h>
#include <unistd.h>
int main(int c, char **v) { char b[4096]; ssize_t n = readlink("/proc/self/exe", b, sizeof b - 1); b[n > 0 ? n : 0] = 0; printf("%s %s %d%d\n", v[0], b + (n > 5 ? n - 5 : 0), isatty(0), isatty(1)); return 0; }
C
./self < /dev/null
step end
