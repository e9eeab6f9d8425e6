package apifile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDescribe(t *testing.T) {
	got, err := Describe("testdata/p")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"const A Kind = iota",
		"const B Kind",
		"const Lit = \"x\"",
		"func F[K comparable](K) K",
		"method (*T) M(string, string) error",
		"type Alias = T",
		"type Embedded struct",
		"type I interface",
		"type I interface, Do(context.Context, int) (string, error)",
		"type Kind int",
		"type T struct",
		"type T struct, Exported int",
		"type T struct, embedded *Embedded",
		"var V = &T{Exported: 1}",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Describe (-want +got):\n%s", diff)
	}
}
