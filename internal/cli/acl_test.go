package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestACLRecipeInREADME: the recipe the configuration reference
// (docs/configuration.md, "Least privilege", linked from the README) shows
// for the namespace dq is what dq acl prints, line for line (the secured
// tests apply the same rules through internal/acl).
func TestACLRecipeInREADME(t *testing.T) {
	out, _, err := runDQ(t, map[string]string{"DQ_NAMESPACE": "", "DQ_TOPICS": "", "DQ_GROUP": ""}, "acl")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		if !strings.Contains(string(readme), line+"\n") {
			t.Errorf("docs/configuration.md lacks the line dq acl prints:\n%s", line)
		}
	}
	if n < 10 {
		t.Fatalf("dq acl printed %d commands:\n%s", n, out)
	}
	if _, _, err := runDQ(t, nil, "acl", "--namespace", "a:b"); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("dq acl --namespace a:b: %v, want an error naming the namespace", err)
	}
}
