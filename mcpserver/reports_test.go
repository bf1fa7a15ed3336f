package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/report"
)

// TestStoreBytes checks that the report store is bounded in bytes, not only in count: big reports evict
// the oldest, and one larger than the whole budget is not kept.
func TestStoreBytes(t *testing.T) {
	out := func(id string, size int) *RunOutput {
		return &RunOutput{Report: *report.New("p", []string{"true"}), ID: id, Stdout: strings.Repeat("x", size)}
	}
	s := newStore(100, 25_000)
	for i, id := range []string{"a", "b", "c"} {
		if o := out(id, 10_000); !s.put(o, size(t, o)) {
			t.Fatalf("put %s (#%d): not kept", id, i)
		}
	}
	if got := s.list(); len(got) != 2 || got[0] != "c" || got[1] != "b" {
		t.Errorf("kept %v, want [c b]: three reports of 10 KB exceed 25 KB", got)
	}
	if s.bytes > s.maxBytes {
		t.Errorf("store holds %d bytes, over its %d", s.bytes, s.maxBytes)
	}
	if o := out("huge", 30_000); s.put(o, size(t, o)) {
		t.Error("a report larger than the whole budget was kept")
	}
	if _, ok := s.get("huge"); ok {
		t.Error("get finds a report that was not kept")
	}
}

// size is what handleRun counts for a report: its JSON encoding's length.
func size(t *testing.T, out *RunOutput) int64 {
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(b)) + 1
}
