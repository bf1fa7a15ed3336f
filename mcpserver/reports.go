package mcpserver

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// store keeps the last n results in memory, oldest evicted first.
type store struct {
	mu    sync.Mutex
	n     int
	order []string
	byID  map[string]*RunOutput
}

func newStore(n int) *store { return &store{n: n, byID: map[string]*RunOutput{}} }

func (s *store) put(out *RunOutput) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[out.ID] = out
	s.order = append(s.order, out.ID)
	for len(s.order) > s.n {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
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
