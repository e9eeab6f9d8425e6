package ddblock_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock/internal/apifile"
)

// TestAPIFile: api/ddblock.txt describes the exported API as it is. An
// API change fails here until the same change rewrites the file
// (go run ./internal/cmd/apifile) and says what changed in CHANGELOG.md.
func TestAPIFile(t *testing.T) {
	got, err := apifile.Describe(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("api/ddblock.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the exported API differs from api/ddblock.txt (-file +code):\n%s\n"+
			"If the change is meant, run go run ./internal/cmd/apifile and say what changed in CHANGELOG.md.", diff)
	}
}
