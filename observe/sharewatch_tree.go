package observe

import (
	"math"
	"slices"
)

// span is when a pid belonged to a process of the tracked tree (CLOCK_MONOTONIC ns, end inclusive).
type span struct{ start, end uint64 }

// InTree returns whether a process with the host pid was in the fork tree of roots (as Stop filters
// the execs: the roots and their descendants, by the fork tree in event order) at some time within
// [from, to], CLOCK_MONOTONIC ns. A pid is in the tree from its fork (a root not seen forked: from the
// start) to its process's end (while its leader's exit may leave threads: until the pid is handed out
// again). Call it after Stop.
func (e *Events) InTree(roots []int) func(pid int, from, to uint64) bool {
	spans := map[int][]span{}
	open := map[int]int{} // pid -> index of its open span
	begin := func(pid int, ts uint64) {
		if _, ok := open[pid]; !ok {
			spans[pid] = append(spans[pid], span{ts, math.MaxUint64})
			open[pid] = len(spans[pid]) - 1
		}
	}
	end := func(pid int, ts uint64) {
		if i, ok := open[pid]; ok {
			spans[pid][i].end = ts
			delete(open, pid)
		}
	}
	born := map[int]bool{}
	for _, ev := range e.log {
		if ev.what == procEventFork && slices.Contains(roots, ev.pid) {
			born[ev.pid] = true
		}
	}
	for _, r := range roots {
		if !born[r] {
			begin(r, 0)
		}
	}
	for _, ev := range e.log {
		switch ev.what {
		case procEventFork:
			_, parentIn := open[ev.parent]
			if parentIn || slices.Contains(roots, ev.pid) {
				end(ev.pid, ev.ts)
				begin(ev.pid, ev.ts)
			} else {
				end(ev.pid, ev.ts) // a pid reused outside the tree
			}
		case procEventExit:
			if !ev.leader {
				end(ev.pid, ev.ts)
			}
		}
	}
	return func(pid int, from, to uint64) bool {
		for _, s := range spans[pid] {
			if s.start <= to && from <= s.end {
				return true
			}
		}
		return false
	}
}
