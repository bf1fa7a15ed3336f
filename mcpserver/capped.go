package mcpserver

import "sync"

// capped keeps the first max bytes written to it and counts the rest, so that a chatty command cannot
// fill the server's memory or the client's context.
type capped struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	total   int64
	onFirst func() // called once, at the first write
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total == 0 && len(p) > 0 && c.onFirst != nil {
		go c.onFirst()
	}
	c.total += int64(len(p))
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// result returns what was kept, whether anything was dropped, and how many bytes were written in all.
func (c *capped) result() (string, bool, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf), c.total > int64(len(c.buf)), c.total
}
