package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The markers of the generated section in docs/benchmarks.md and the
// heading put in front of them when they are missing.
const (
	BeginMarker = "<!-- compare:begin -->"
	EndMarker   = "<!-- compare:end -->"
	Heading     = "## delayq vs asynq (issue #5)"
)

// ReplaceSection puts body between the markers of the file at path and
// leaves every other byte unchanged. Without markers it appends the
// heading and the markers at the end. The file is read just before it is
// written, to keep the window for a concurrent edit small.
func ReplaceSection(path, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := replaceSection(old, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func replaceSection(old []byte, body string) ([]byte, error) {
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	b := bytes.Index(old, []byte(BeginMarker))
	e := bytes.Index(old, []byte(EndMarker))
	switch {
	case b >= 0 && e > b:
		var out bytes.Buffer
		out.Write(old[:b+len(BeginMarker)])
		out.WriteString("\n")
		out.WriteString(body)
		out.Write(old[e:])
		return out.Bytes(), nil
	case b >= 0 || e >= 0:
		return nil, errors.New("only one of the compare markers is present (or they are in the wrong order); fix the file by hand")
	}
	var out bytes.Buffer
	out.Write(old)
	if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
		out.WriteString("\n")
	}
	if len(old) > 0 {
		out.WriteString("\n")
	}
	out.WriteString(Heading + "\n\n" + BeginMarker + "\n" + body + EndMarker + "\n")
	return out.Bytes(), nil
}
