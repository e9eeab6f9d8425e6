package p

import "context"

type T struct {
	Exported   int
	unexported int
	*Embedded
}

type Embedded struct{}

type I interface {
	Do(ctx context.Context, n int) (string, error)
	hidden()
}

type Alias = T

type hiddenType struct{}

func (hiddenType) Visible() {}

func (t *T) M(a, b string) error { return nil }

func (t *T) m() {}

func F[K comparable](k K) K { return k }

const (
	A Kind = iota
	B
	c
)

const Lit = "x"

type Kind int

var V = &T{Exported: 1}
