package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// fileCycle creates n files of 100 bytes (1,000 to a directory) below ./tree, removes the tree and
// creates it again, and prints the three phases' seconds: what `rm -rf node_modules && npm ci` does to
// a file system. The same python3 runs it on the host and in the sandbox.
const fileCycle = `import os, shutil, sys, time
n = int(sys.argv[1])
def create():
    for i in range(n):
        d = "tree/%d" % (i // 1000)
        if i % 1000 == 0:
            os.makedirs(d)
        with open("%s/%d" % (d, i), "wb") as f:
            f.write(b"x" * 100)
t0 = time.time(); create(); t1 = time.time(); shutil.rmtree("tree"); t2 = time.time(); create(); t3 = time.time()
shutil.rmtree("tree")
print("%.2f %.2f %.2f" % (t1 - t0, t2 - t1, t3 - t2))
`

// benchFiles times the create/delete/create cycle of n files on the host (in a directory of dir's file
// system) and in `sbx exec` (on the sandbox's writable layer), once each, and prints both and their ratio
// (the target: the sandbox within 1.5x the host).
func benchFiles(sbx, dir string, n int) error {
	fmt.Printf("create %d files, delete them, create them again (s: create, delete, create again; total)\n", n)
	var totals []float64
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"host", []string{"python3", "-c", fileCycle, strconv.Itoa(n)}},
		{"sbx exec", []string{sbx, "exec", "-q", "--", "python3", "-c", fileCycle, strconv.Itoa(n)}},
	} {
		work := filepath.Join(dir, "files-"+strings.ReplaceAll(c.name, " ", "-"))
		if err := os.Mkdir(work, 0o755); err != nil {
			return err
		}
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "SBX_SERVICE=off") // a cold run, whatever service the machine has
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		os.RemoveAll(work)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		var a, b, d float64
		if _, err := fmt.Sscan(string(out), &a, &b, &d); err != nil {
			return fmt.Errorf("%s: %q: %w", c.name, out, err)
		}
		totals = append(totals, a+b+d)
		fmt.Printf("%-10s %7.2f %7.2f %7.2f  %7.2f\n", c.name, a, b, d, a+b+d)
	}
	fmt.Printf("sbx exec / host: %.2fx (target <= 1.50x)\n", totals[1]/totals[0])
	return nil
}
