// Command apifile writes api/ddblock.txt, the description of package
// ddblock's exported API that TestAPIFile compares with the code. Run it
// from the repository's root after an intended API change, and say what
// changed in CHANGELOG.md:
//
//	go run ./internal/cmd/apifile
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/ddblock/ddblock/internal/apifile"
)

func main() {
	lines, err := apifile.Describe(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apifile:", err)
		os.Exit(1)
	}
	if err := os.WriteFile("api/ddblock.txt", []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "apifile:", err)
		os.Exit(1)
	}
	fmt.Printf("api/ddblock.txt: %d lines\n", len(lines))
}
