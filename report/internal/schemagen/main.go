// Command schemagen writes the report's JSON Schema to the file named by its argument
// (report/schema.json through go generate ./report/schema; sbx embeds that file and prints it).
package main

import (
	"fmt"
	"os"

	"github.com/sbx-dev/sbx/report/schema"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: schemagen FILE")
		os.Exit(2)
	}
	b, err := schema.Marshal()
	if err == nil {
		err = os.WriteFile(os.Args[1], b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "schemagen: %v\n", err)
		os.Exit(1)
	}
}
