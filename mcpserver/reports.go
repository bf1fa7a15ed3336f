package mcpserver

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// store keeps the last n results in memory within a budget of bytes (their JSON size), oldest evicted
// first. A result larger than the whole budget is not kept.
type store struct {
	mu       sync.Mutex
	n        int
	maxBytes int64
	bytes    int64
	order    []string
	byID     map[string]*RunOutput
	size     map[string]int64
}

func newStore(n int, maxBytes int64) *store {
	return &store{n: n, maxBytes: maxBytes, byID: map[string]*RunOutput{}, size: map[string]int64{}}
}

// put keeps out; it says whether it did (false: larger than the whole budget).
func (s *store) put(out *RunOutput, size int64) bool {
	if size > s.maxBytes {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[out.ID], s.size[out.ID] = out, size
	s.order = append(s.order, out.ID)
	s.bytes += size
	for len(s.order) > s.n || s.bytes > s.maxBytes {
		old := s.order[0]
		s.bytes -= s.size[old]
		delete(s.byID, old)
		delete(s.size, old)
		s.order = s.order[1:]
	}
	return true
}

func (s *store) get(id string) (*RunOutput, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, ok := s.byID[id]
	return out, ok
}

// list returns the ids kept, newest first.
func (s *store) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.order))
	for i := len(s.order) - 1; i >= 0; i-- {
		out = append(out, s.order[i])
	}
	return out
}

// newID returns a run id: "run-" and 12 random hex digits.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
