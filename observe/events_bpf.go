package observe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// The kernel-side filter's map holds the tracked processes alive at a time: sbx and its descendants, that
// is the sandbox's processes (bounded by its pids limit), sbx's own helpers and, in a long-running server,
// the other runs in progress. It takes an entry per process as it forks (BPF_F_NO_PREALLOC); what its size
// costs is the hash's bucket array, 16 bytes a bucket, made and freed on every run: up to 2048 entries it
// fits a kmalloc (32 KiB) and the map is made in about 30 µs here, against 90 µs at 4096 and 170 µs at
// 8192 (vmalloc'd). Past its size the filter opens up (see tracker) rather than lose events.
const (
	defaultTrackMax = 2048 // twice the largest pids limit of the built-in profiles
	maxTrackMax     = 1 << 16
)

// trackSize is the map's size for EventsOptions.MaxProcesses.
func trackSize(n int) int { return min(max(n, defaultTrackMax), maxTrackMax) }

// loadTracker is startTracker; tests replace it to make the map tiny or the load fail.
var loadTracker = startTracker

// tracker is the eBPF socket filter of a process-events socket: the kernel passes the socket only the
// events of the tracked processes and their descendants, so that a run's reader is not woken by what the
// rest of the host (other runs above all) does. The filter learns a tracked process's child from its fork
// event, in the kernel, before the child can run: no event of the tree can slip past while userspace
// catches up. Userspace keeps its own tracking (Events.tracked) as the second line; the two agree because
// both learn from the events the filter passes, in the same order.
//
// A process ends when its last task does, which is not always its first thread (the leader): a leader
// can exit alone (pthread_exit) and leave a thread that forks and execs on, under the same tgid. So the
// map counts each learnt process's tasks, from the thread creations and exits it sees (and drops), and
// passes the exit of the last task as the process's exit, whichever thread it is. A pid the host reuses
// afterwards is not in the map any more, so nothing of the unrelated process that gets it passes; a pid
// still there when reused (a seeded one) is dropped at its new fork by an untracked parent. Left to
// userspace, a stale pid would stay until the reader caught up, and its reuser's forks would enter the
// map. Seeded pids (Track; their threads were not seen) end at their leader's exit, as before.
//
// When the filter cannot insert a child (the map is full, or the kernel is out of memory), it sets the
// open flag and passes every whole process's event from then on, as the classic filter does: the stream
// gets slower, never incomplete.
type tracker struct {
	fd   int       // the socket: the classic filter is attached to it when even the flag cannot be set
	pids *ebpf.Map // hash of host tgids (u32 -> u32 live tasks, or seeded|1): the tracked processes
	open *ebpf.Map // array of one u32: non-zero once the filter passes everything
}

// seeded marks the map entry of a pid given by Track, whose tasks were not counted.
const seeded = 1 << 31

// startTracker makes the maps, seeds them with pids, and attaches the filter to the socket fd. Call it
// before the socket joins the multicast group. The program's fd is closed once attached; the socket holds
// the program and the program its maps, so closing the socket and the tracker frees everything.
func startTracker(fd, maxPids int, pids []int) (*tracker, error) {
	t := &tracker{fd: fd}
	attached := false
	defer func() {
		if !attached {
			t.close()
		}
	}()
	var err error
	t.pids, err = ebpf.NewMap(&ebpf.MapSpec{Name: "sbx_tracked", Type: ebpf.Hash, KeySize: 4, ValueSize: 4,
		MaxEntries: uint32(maxPids), Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		return nil, fmt.Errorf("create the tracked-pids map: %w", err)
	}
	t.open, err = ebpf.NewMap(&ebpf.MapSpec{Name: "sbx_open", Type: ebpf.Array, KeySize: 4, ValueSize: 4,
		MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create the filter's flag map: %w", err)
	}
	for _, p := range pids {
		if err := t.pids.Update(uint32(p), uint32(seeded|1), ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("track pid %d in the kernel: %w", p, err)
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sbx_events", Type: ebpf.SocketFilter,
		License: "Apache-2.0", Instructions: trackerProgram(t.pids.FD(), t.open.FD())})
	if err != nil {
		return nil, fmt.Errorf("load the process-events filter: %w", err)
	}
	defer prog.Close()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_BPF, prog.FD()); err != nil {
		return nil, fmt.Errorf("attach the process-events filter: %w", err)
	}
	attached = true
	return t, nil
}

// add tracks pids from now on; one the filter learnt at its fork keeps its count. A pid the map cannot
// take opens the filter, so that its events still reach userspace.
func (t *tracker) add(pids ...int) {
	for _, p := range pids {
		err := t.pids.Update(uint32(p), uint32(seeded|1), ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			t.openUp()
			return
		}
	}
}

// openUp makes the filter pass every whole process's events; failing that, it puts the classic filter in
// its place, which does the same.
func (t *tracker) openUp() {
	if t.open.Update(uint32(0), uint32(1), ebpf.UpdateAny) != nil {
		_ = unix.SetsockoptSockFprog(t.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, eventsFilter())
	}
}

// opened says whether the filter passes everything (an insertion failed).
func (t *tracker) opened() bool {
	var v uint32
	_ = t.open.Lookup(uint32(0), &v)
	return v != 0
}

func (t *tracker) close() {
	if t.pids != nil {
		t.pids.Close()
	}
	if t.open != nil {
		t.open.Close()
	}
}

// The filter's stack, below the frame pointer: the start of the proc_event (what, cpu, timestamp, and the
// first four u32 of the event's data), the key of open (0) and the value a learnt child starts with (1).
//
// fork: data = parent_pid, parent_tgid, child_pid, child_tgid; exec: process_pid, process_tgid; exit:
// process_pid, process_tgid, ...
const (
	stWhat   = -32
	stData0  = -16
	stData1  = -12
	stData2  = -8
	stData3  = -4
	stKey    = -36
	stValue  = -40
	evLoaded = 32 // bytes of the proc_event copied to the stack
	// endedLen is what the filter keeps of the exit it passes as a whole process's end: up to
	// process_pid and process_tgid. Exits passed whole (the classic filter's, the opened one's) are a
	// leader's, whose process may live on in its other threads.
	endedLen = procEventDataOff + 8
)

// trackerProgram is the filter. It copies the event to the stack with bpf_skb_load_bytes, which keeps
// the host's byte order (the classic filter's loads swap it). R6 holds the skb, R9 the open flag.
func trackerProgram(pidsFD, openFD int) asm.Instructions {
	p := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1), asm.Mov.Imm(asm.R2, procEventOffset)}
	p = append(p, stackPtr(asm.R3, stWhat)...)
	p = append(p, asm.Mov.Imm(asm.R4, evLoaded), asm.FnSkbLoadBytes.Call(), asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.StoreImm(asm.RFP, stKey, 0, asm.Word), asm.StoreImm(asm.RFP, stValue, 1, asm.Word))
	p = append(p, mapLookup(openFD, stKey)...)
	p = append(p, asm.Mov.Imm(asm.R9, 0), asm.JEq.Imm(asm.R0, 0, "decode"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.Word),
		asm.LoadMem(asm.R7, asm.RFP, stWhat, asm.Word).WithSymbol("decode"),
		asm.JEq.Imm32(asm.R7, procEventExec, "exec"),
		asm.JEq.Imm32(asm.R7, procEventFork, "fork"),
		asm.JEq.Imm32(asm.R7, int32(-procEventExit), "exit"), // 0x80000000 as an int32
		asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"), asm.Return(),
		asm.LoadMem(asm.R0, asm.R6, 0, asm.Word).WithSymbol("pass"), asm.Return()) // skb->len: keep it all
	p = append(p, execFilter(pidsFD)...)
	p = append(p, forkFilter(pidsFD, openFD)...)
	p = append(p, threadFilter(pidsFD)...)
	return append(p, exitFilter(pidsFD)...)
}

// execFilter passes an exec iff the process is tracked.
func execFilter(pidsFD int) asm.Instructions {
	p := asm.Instructions{asm.JNE.Imm(asm.R9, 0, "pass").WithSymbol("exec")}
	p = append(p, mapLookup(pidsFD, stData1)...)
	return append(p, asm.JEq.Imm(asm.R0, 0, "drop"), asm.Ja.Label("pass"))
}

// forkFilter passes the fork of a whole process iff the parent is tracked, and tracks the child (one
// task). A child that cannot be tracked opens the filter for good. The fork of a child of an untracked
// parent drops the child's pid from the map: if it is there, the host reused it.
func forkFilter(pidsFD, openFD int) asm.Instructions {
	p := asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, stData2, asm.Word).WithSymbol("fork"),
		asm.LoadMem(asm.R2, asm.RFP, stData3, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "thread"), asm.JNE.Imm(asm.R9, 0, "pass"),
	}
	p = append(p, mapLookup(pidsFD, stData1)...)
	p = append(p, asm.JEq.Imm(asm.R0, 0, "reused"), asm.LoadMapPtr(asm.R1, pidsFD))
	p = append(p, stackPtr(asm.R2, stData3)...)
	p = append(p, stackPtr(asm.R3, stValue)...)
	p = append(p, asm.Mov.Imm(asm.R4, int32(ebpf.UpdateAny)), asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"))
	p = append(p, mapLookup(openFD, stKey)...)
	p = append(p, asm.JEq.Imm(asm.R0, 0, "pass"), asm.StoreImm(asm.R0, 0, 1, asm.Word), asm.Ja.Label("pass"),
		asm.LoadMapPtr(asm.R1, pidsFD).WithSymbol("reused"))
	p = append(p, stackPtr(asm.R2, stData3)...)
	return append(p, asm.FnMapDeleteElem.Call(), asm.Ja.Label("drop"))
}

// threadFilter counts a new thread of a tracked process (child_tgid), and drops the event.
func threadFilter(pidsFD int) asm.Instructions {
	p := asm.Instructions{asm.JNE.Imm(asm.R9, 0, "drop").WithSymbol("thread")}
	p = append(p, mapLookup(pidsFD, stData3)...)
	return append(p, asm.JEq.Imm(asm.R0, 0, "drop"), asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.Word), asm.Ja.Label("drop"))
}

// exitFilter counts down the tasks of a tracked process (process_tgid) and passes the exit of its last
// one, after which the pid leaves the map; a seeded process ends at its leader's exit. Such an exit is
// cut to endedLen bytes: it says the process is gone. Opened, the filter passes the leaders' exits
// whole, as the classic filter does, and they say only that the leader is gone (see Events.onExit).
func exitFilter(pidsFD int) asm.Instructions {
	p := asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, stData0, asm.Word).WithSymbol("exit"),
		asm.LoadMem(asm.R2, asm.RFP, stData1, asm.Word),
		// R8: whether the exiting task is the leader.
		asm.Mov.Imm(asm.R8, 0), asm.JNE.Reg(asm.R1, asm.R2, "leader"), asm.Mov.Imm(asm.R8, 1),
		asm.JEq.Imm(asm.R9, 0, "closed").WithSymbol("leader"),
		asm.JNE.Imm(asm.R8, 0, "pass"), asm.Ja.Label("drop"),
	}
	lookup := mapLookup(pidsFD, stData1)
	lookup[0] = lookup[0].WithSymbol("closed")
	p = append(p, lookup...)
	p = append(p, asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word), asm.JSet.Imm32(asm.R1, int32(-seeded), "seeded"),
		asm.Mov.Imm32(asm.R1, -1), fetchAdd(asm.R0, asm.R1), asm.JNE.Imm32(asm.R1, 1, "drop"),
		asm.Ja.Label("forget"),
		asm.JEq.Imm(asm.R8, 0, "drop").WithSymbol("seeded"),
		asm.LoadMapPtr(asm.R1, pidsFD).WithSymbol("forget"))
	p = append(p, stackPtr(asm.R2, stData1)...)
	return append(p, asm.FnMapDeleteElem.Call(), asm.Mov.Imm(asm.R0, endedLen), asm.Return())
}

// fetchAdd is `src = atomic_fetch_add((u32 *)dst, src)` (BPF_ATOMIC with BPF_ADD|BPF_FETCH, Linux 5.12),
// which cilium/ebpf's asm does not spell.
func fetchAdd(dst, src asm.Register) asm.Instruction {
	const bpfAddFetch = 0x01 // BPF_ADD (0) | BPF_FETCH (1)
	return asm.Instruction{OpCode: asm.StoreXAddOp(asm.Word), Dst: dst, Src: src, Constant: bpfAddFetch}
}

// stackPtr sets r to the frame pointer plus off.
func stackPtr(r asm.Register, off int32) asm.Instructions {
	return asm.Instructions{asm.Mov.Reg(r, asm.RFP), asm.Add.Imm(r, off)}
}

// mapLookup calls bpf_map_lookup_elem on the map with the key at the stack offset: R0 is the value or 0.
func mapLookup(mapFD int, key int32) asm.Instructions {
	p := append(asm.Instructions{asm.LoadMapPtr(asm.R1, mapFD)}, stackPtr(asm.R2, key)...)
	return append(p, asm.FnMapLookupElem.Call())
}
