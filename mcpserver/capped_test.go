package mcpserver

import "testing"

func TestCapped(t *testing.T) {
	c := &capped{max: 5}
	c.Write([]byte("abc"))
	c.Write([]byte("defgh"))
	got, cut, n := c.result()
	if got != "abcde" || !cut || n != 8 {
		t.Errorf("got %q, %v, %d; want \"abcde\", true, 8", got, cut, n)
	}
}
