# The CI subset, in the VM as root (vm/run.sh KERNEL vm/jobs/smoke.sh): sbx's main cases once each,
# with bin/sbx as make build makes it. On 5.10 (no Landlock) only the refusal is checked.
# Each check prints PASS/FAIL NAME; the job fails when a strict one fails (see lib.sh's check).
. ./lib.sh
set -u
W=/opt/sbx/smoke
rm -rf $W && mkdir -p $W
# Runs of root work in a directory of root's own, not the payload's (which tests may list).
cd $W

echo "kernel $(uname -r); lsm: $(cat /sys/kernel/security/lsm 2>/dev/null); cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "/dev/net/tun: $(stat -c '%a %U' /dev/net/tun 2>&1)"

# exec_json NAME ARGS...: sbx exec -q --json - ARGS: report in $W/NAME.json, command's output in
# $W/NAME.err, sbx's status in $W/NAME.status (and echoed).
exec_json() {
	local name=$1
	shift
	timeout 600 "$SBX" exec -q --json - "$@" >"$W/$name.json" 2>"$W/$name.err" </dev/null
	echo $? >"$W/$name.status"
	echo "sbx exit status $(cat "$W/$name.status")"
}
# show NAME: what a failing check prints: sbx's stderr and the report's essentials.
show() {
	echo "--- stderr:"
	head -c 3000 "$W/$1.err"
	echo "--- report:"
	jq -c '{verdict, exit_code, oom_killed, pids_limit_hit, violations: [.violations[]?.rule], left_running: [.processes.left_running[]? | .argv | join(" ")], limits, notes}' "$W/$1.json" 2>&1 | head -c 3000
}

if [ "${SBX_VM_KERNEL:-}" = 5.10 ]; then
	refusal() {
		"$SBX" exec -- true >$W/refuse.out 2>$W/refuse.err
		st=$?
		echo "status $st; stderr:"
		cat $W/refuse.err
		# One error line naming Landlock; sbx's hints come on lines of their own ("sbx: hint: ...").
		want "[ $st = 125 ]" "exit status 125" &&
			want "[ $(grep -c '^sbx: error:' $W/refuse.err) = 1 ]" "one 'sbx: error:' line" &&
			want "grep -q '^sbx: error:.*[Ll]andlock' $W/refuse.err" "the error names Landlock" &&
			want "! grep -v '^sbx: \(error\|hint\):' $W/refuse.err" "nothing but the error and hints on stderr"
	}
	VERBOSE=1 check "5.10 refusal (no Landlock)" refusal
	finish
	exit
fi

# The direct start must be what runs: a mount call these kernels refuse shows as the mounts row's "no"
# (the probe) or as a failed run, and either fails the smoke.
version() {
	"$SBX" version >$W/version.txt
	st=$?
	cat $W/version.txt
	want "[ $st = 0 ]" "exit 0" && want "grep -Eq '^mounts +yes' $W/version.txt" "mounts: yes (the direct start's probe)"
}
VERBOSE=1 check "sbx version" version

# The classic case: exit 0 after leaving a nohup'd sleep and a listener behind.
classic() {
	exec_json classic -- sh -c 'nohup sleep 300 >/dev/null 2>&1 & python3 -m http.server 8765 >/dev/null 2>&1 & exit 0'
	show classic
	want "[ $(cat $W/classic.status) = 100 ]" "exit 100" &&
		want "[ \"$(jq -r .verdict $W/classic.json)\" = violation ]" "verdict violation" &&
		want "jq -e '[.processes.left_running[].argv[0]] | index(\"sleep\")' $W/classic.json >/dev/null" "sleep in left_running"
}
check "classic case (violation, exit 100)" classic

memory() {
	exec_json memory --memory 64M -- python3 -c 'b = b"x" * (320 << 20); print(len(b))'
	show memory
	want "jq -e '.oom_killed == true' $W/memory.json >/dev/null" "oom_killed true"
}
check "memory limit 64M, 320 MiB allocated: OOM" memory

pids() {
	exec_json pids --pids 16 -- sh -c 'for i in $(seq 40); do sleep 3 & done; wait'
	show pids
	want "jq -e '.pids_limit_hit == true' $W/pids.json >/dev/null" "pids_limit_hit true"
}
check "pids limit 16, 40 children: limit hit" pids

# The freezer case: the command exits, a background process it started is still there.
freezer() {
	exec_json freezer -- sh -c 'sleep 120 & echo started; exit 0'
	show freezer
	want "[ $(cat $W/freezer.status) = 100 ]" "exit 100" &&
		want "jq -e '[.processes.left_running[].argv | join(\" \")] | index(\"sleep 120\")' $W/freezer.json >/dev/null" "sleep 120 in left_running"
}
check "background process reported in left_running" freezer

# The network contract against a fake upstream, as the host tests' fakenet builds it (internal/fakenet):
# a namespace whose lo holds a public host (203.0.113.10, HTTP on 443) and a DNS server (198.51.100.53,
# allowed.test -> 203.0.113.10). sbx puts the sandbox's uplink there (--uplink-netns).
cat >$W/fakedns.py <<'EOF'
import socket, struct
A = {"allowed.test": "203.0.113.10"}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.53", 53))
while True:
    q, peer = s.recvfrom(4096)
    tid = struct.unpack(">H", q[:2])[0]
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
        i += q[i] + 1
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    question = q[12:i + 5]
    ip = A.get(".".join(labels))
    ans = b""
    if ip and qtype == 1:
        ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton(ip)
    rcode = 0 if ip else 3
    s.sendto(struct.pack(">HHHHHH", tid, 0x8180 | rcode, 1, 1 if ans else 0, 0, 0) + question + ans, peer)
EOF
netcontract() {
	local up=sbx-vm-up pids=""
	ip netns add $up && ip -n $up link set lo up &&
		ip -n $up addr add 203.0.113.10/32 dev lo && ip -n $up addr add 198.51.100.53/32 dev lo || return 1
	mkdir -p $W/www && echo fake-public >$W/www/index.html
	nsenter --net=/run/netns/$up python3 -m http.server --bind 203.0.113.10 -d $W/www 443 >$W/http.log 2>&1 &
	pids="$pids $!"
	nsenter --net=/run/netns/$up python3 $W/fakedns.py >$W/dns.log 2>&1 &
	pids="$pids $!"
	sleep 2
	local flags="--uplink-netns $up --dns-upstream 198.51.100.53:53"
	echo "--- sbx probe:"
	timeout 600 "$SBX" probe $flags --allow 203.0.113.10:443 --allow allowed.test:443
	local probe=$?
	echo "probe status $probe"
	exec_json net $flags --allow allowed.test:443 -- sh -c 'curl -sS -m 20 http://allowed.test:443/; curl -sS -m 5 http://203.0.113.10:80/ >/dev/null 2>&1; exit 0'
	show net
	jq -c '.network' $W/net.json | head -c 2000
	echo
	kill $pids 2>/dev/null
	wait $pids 2>/dev/null
	ip netns del $up
	want "[ $probe = 0 ]" "probe passes" &&
		want "grep -q fake-public $W/net.err" "allowed.test:443 reached" &&
		want "jq -e '[.network.denied[] | .port] | index(80)' $W/net.json >/dev/null" "203.0.113.10:80 in network.denied"
}
check "network contract: probe and exec against a fake upstream" netcontract

# The MCP server over stdio: initialize, tools/list, a tools/call of sbx_run.
cat >$W/mcp.py <<'EOF'
import json, signal, subprocess, sys
signal.alarm(600)
p = subprocess.Popen([sys.argv[1], "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def call(id, method, params):
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n")
    p.stdin.flush()
    for line in p.stdout:
        m = json.loads(line)
        if m.get("id") == id:
            return m
    sys.exit("server closed stdout before answering %s" % method)
init = call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "sbx-vm-smoke", "version": "0"}})
print("server:", init["result"]["serverInfo"])
p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
tools = [t["name"] for t in call(2, "tools/list", {})["result"]["tools"]]
print("tools:", tools)
assert "sbx_run" in tools, "no sbx_run"
r = call(3, "tools/call", {"name": "sbx_run", "arguments": {"command": "echo hello-mcp"}})["result"]
sc = r.get("structuredContent") or {}
print("sbx_run:", {k: sc.get(k) for k in ("verdict", "exit_code", "stdout", "stderr")}, "isError:", r.get("isError"))
assert not r.get("isError"), r
assert sc.get("stdout") == "hello-mcp\n" and sc.get("verdict") == "pass", sc
p.stdin.close()
p.wait(timeout=60)
EOF
mcp() { python3 $W/mcp.py "$SBX"; }
check "MCP server: initialize, tools/list, sbx_run" mcp

# Without root: sbxuser in a Delegate=yes scope of its user manager (lib.sh's as_user): the run gets a
# child cgroup of the scope's, with the memory limit.
rootless_plain() {
	echo "cgroup: $(as_user cat /proc/self/cgroup)"
	as_user "$SBX" exec -- sh -c 'echo hello-rootless; id -u'
	st=$?
	echo "status $st"
	want "[ $st = 0 ]" "exit 0"
}
check "rootless: plain run as sbxuser" rootless_plain

rootless_memory() {
	as_user "$SBX" exec -q --json - --memory 64M -- python3 -c 'b = b"x" * (320 << 20); print(len(b))' >$W/umem.json 2>$W/umem.err
	echo "status $?"
	show umem
	want "jq -e '.oom_killed == true' $W/umem.json >/dev/null" "oom_killed true" &&
		want "jq -e '.limits.enforced[] | select(.limit == \"memory\" and .by == \"cgroup\")' $W/umem.json >/dev/null" "memory held by the cgroup"
}
check "rootless: memory limit 64M via the delegated cgroup" rootless_memory

# sbx serve under systemd: root's socket-activated service (contrib/systemd/system) and sbxuser's in
# its user manager (contrib/systemd/user), as make install puts them: sbx exec hands its runs to them
# (-v says so), the second from a warm sandbox, with the command's status; stopped, they leave no run.
for kind in system user; do
	mkdir -p /etc/systemd/$kind
	for u in sbx.socket sbx.service; do
		sed 's|@PREFIX@|/opt/sbx/work|g' /opt/sbx/work/contrib/systemd/$kind/$u >/etc/systemd/$kind/$u
	done
done
systemctl daemon-reload
serve_root() {
	systemctl start sbx.socket
	# The caller's environment as a login's: HOME, umask (the service's are the unit's)
	for i in 1 2; do
		(umask 022 && "$SBX" exec -v -q -- sh -c 'exit 3') >$W/serve$i.out 2>&1 </dev/null
		echo "status $?" >>$W/serve$i.out
		cat $W/serve$i.out
		sleep 1
	done
	# as sudo runs it: the sudo user's home travels with the run (its decoys), the service takes it
	(umask 022 && SUDO_USER=sbxuser "$SBX" exec -v -q -- true) >$W/serve-sudo.out 2>&1 </dev/null
	cat $W/serve-sudo.out
	systemctl stop sbx.service sbx.socket
	journalctl -u sbx.service --no-pager -n 5 -o cat
	want "grep -q 'went through the sbx service at /run/sbx.sock' $W/serve1.out" "through root's service" &&
		want "grep -q '(a warm sandbox)' $W/serve2.out" "the second run warm" &&
		want "grep -q '^status 3$' $W/serve2.out" "the command's status" &&
		want "grep -q 'went through the sbx service' $W/serve-sudo.out" "a run under sudo through it too" &&
		want "journalctl -u sbx.service --no-pager -o cat | grep -q 'served 3 runs'" "the service says what it served" &&
		want "journalctl -u sbx.service --no-pager -o cat | grep -Eq 'served 3 runs, [0-9]+ of them in a warm sandbox, [23] for a fast client'" "handed over by the fast client" &&
		want "[ -z \"$(ls /run/sbx/runs 2>/dev/null)\" ]" "no run left"
}
check "sbx serve: root's, socket-activated" serve_root

serve_user() {
	as_user systemctl --user daemon-reload
	as_user systemctl --user start sbx.socket
	for i in 1 2; do
		as_user "$SBX" exec -v -q -- sh -c 'exit 3' >$W/userve$i.out 2>&1 </dev/null
		echo "status $?" >>$W/userve$i.out
		cat $W/userve$i.out
		sleep 1
	done
	# its runs' limits held by a cgroup below the service's (Delegate=yes), as a cold run's in a scope
	as_user "$SBX" exec -v -q --json - --memory 64M -- true >$W/userve-mem.json 2>$W/userve-mem.err </dev/null
	cat $W/userve-mem.err
	jq -c .limits $W/userve-mem.json
	as_user systemctl --user stop sbx.service sbx.socket
	want "grep -q 'went through the sbx service at /run/user/1000/sbx.sock' $W/userve1.out" "through sbxuser's service" &&
		want "grep -q 'went through the sbx service' $W/userve-mem.err" "the run with --memory through it too" &&
		want "jq -e '.limits.enforced[] | select(.limit == \"memory\" and .by == \"cgroup\")' $W/userve-mem.json >/dev/null" "memory held by the cgroup" &&
		want "grep -q '(a warm sandbox)' $W/userve2.out" "the second run warm" &&
		want "grep -q '^status 3$' $W/userve2.out" "the command's status"
}
check "sbx serve: sbxuser's, in its user manager" serve_user

finish
