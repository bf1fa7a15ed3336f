package policy

import (
	"os"
	"testing"
)

func BenchmarkLoadCompileDefault(b *testing.B) {
	for b.Loop() {
		p, err := Load("default")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Compile(p, CompileContext{Cwd: "/tmp", CallerEnv: os.Environ()}); err != nil {
			b.Fatal(err)
		}
	}
}
