// Command structure prints the structure issue 41's redesign is measured by: the lines of non-test
// code of every package, the types with more than 40 methods, the functions longer than 120 lines
// outside tests, and the control plane's imports of what the node owns.
//
//	go run ./internal/archtest/cmd/structure
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/archtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "structure:", err)
		os.Exit(1)
	}
}

func run() error {
	g, err := archtest.Load(".", true)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(g.Root, "docs", "ARCHITECTURE.parts"))
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := archtest.ParseParts("docs/ARCHITECTURE.parts", f)
	if err != nil {
		return err
	}
	s, err := archtest.Measure(p, g, archtest.DefaultOptions)
	if err != nil {
		return err
	}
	s.Report(os.Stdout)
	return nil
}
