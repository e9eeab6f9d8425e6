package ddblock_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
)

// handles are the exported types a caller gets from a constructor: a
// nil or zero one answers every method with a typed error (of
// INVALID_ARGUMENT, or LOCK_NOT_HELD from the guarded writes), or with a
// zero result where the method returns no error. values are plain data types: they must not panic either.
var (
	handles = []reflect.Type{
		reflect.TypeFor[ddblock.Client](),
		reflect.TypeFor[ddblock.Lock](),
		reflect.TypeFor[ddblock.Election](),
		reflect.TypeFor[ddblock.Leadership](),
		reflect.TypeFor[ddblock.Semaphore](),
		reflect.TypeFor[ddblock.LockSet](),
	}
	values = []reflect.Type{
		reflect.TypeFor[ddblock.Error](),
		reflect.TypeFor[ddblock.LockInfo](),
		reflect.TypeFor[ddblock.GuardedWriteError](),
		reflect.TypeFor[ddblock.NoMetrics](),
		reflect.TypeFor[ddblock.Code](),
		reflect.TypeFor[ddblock.SemaphoreInfo](),
	}
)

// Every exported method of every exported type with methods, called on a
// nil and on a zero receiver, with arguments that would be valid on a
// real one: no panic, and a typed error or a zero result. The method
// sets come from reflection, so a method added later is walked too.
func TestZeroAndNilReceivers(t *testing.T) {
	for _, typ := range append(append([]reflect.Type(nil), handles...), values...) {
		handle := typ.Kind() == reflect.Struct && containsType(handles, typ)
		ptr := reflect.PointerTo(typ)
		for i := range ptr.NumMethod() {
			m := ptr.Method(i)
			for _, recv := range []struct {
				name string
				v    reflect.Value
			}{{"nil", reflect.Zero(ptr)}, {"zero", reflect.New(typ)}} {
				if recv.name == "nil" && derefsNil(typ, m.Name) {
					// (*Leadership)(nil).PartitionKey() dereferences the
					// nil Leadership to reach its embedded *Lock, and a
					// method with a value receiver the nil pointer to
					// copy the value: Go's own, before any code of ours.
					continue
				}
				t.Run(typ.Name()+"/"+recv.name+"/"+m.Name, func(t *testing.T) {
					out := callNoPanic(t, recv.v.Method(i), m.Type)
					for j, res := range out {
						checkResult(t, handle, m.Type.Out(j), res)
					}
				})
			}
		}
	}
}

func containsType(list []reflect.Type, t reflect.Type) bool {
	for _, x := range list {
		if x == t {
			return true
		}
	}
	return false
}

// derefsNil reports whether calling the method name on a nil *typ
// dereferences nil before the method runs: a method declared on the
// value, or one typ only has through an embedded pointer field.
func derefsNil(typ reflect.Type, name string) bool {
	if _, ok := typ.MethodByName(name); ok {
		return true // a value receiver
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.Anonymous || f.Type.Kind() != reflect.Pointer {
			continue
		}
		if _, ok := f.Type.MethodByName(name); !ok {
			continue
		}
		// Declared on typ itself, the method shadows the embedded one:
		// its Func then takes *typ directly, not through the field.
		if name == "Context" && typ == reflect.TypeFor[ddblock.Leadership]() {
			return false
		}
		return true
	}
	return false
}

// callNoPanic calls fn with arguments that would be valid on a real
// receiver, failing the test if it panics.
func callNoPanic(t *testing.T, fn reflect.Value, mt reflect.Type) (out []reflect.Value) {
	t.Helper()
	// mt is the method's type with the receiver as its first argument.
	var args []reflect.Value
	n := mt.NumIn()
	if mt.IsVariadic() {
		n-- // no options
	}
	for k := 1; k < n; k++ {
		args = append(args, argFor(t, mt.In(k)))
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panicked: %v", r)
		}
	}()
	return fn.Call(args)
}

func argFor(t *testing.T, at reflect.Type) reflect.Value {
	switch {
	case at == reflect.TypeFor[context.Context]():
		return reflect.ValueOf(context.Background())
	case at == reflect.TypeFor[error]():
		return reflect.ValueOf(error(ddblock.CodeLockHeld))
	case at.Kind() == reflect.String:
		return reflect.ValueOf("k").Convert(at)
	case at.Kind() == reflect.Int:
		return reflect.ValueOf(2).Convert(at)
	case at.Kind() == reflect.Func:
		return reflect.MakeFunc(at, func([]reflect.Value) []reflect.Value {
			t.Error("a function argument was called on a zero receiver")
			panic("called")
		})
	default: // durations, bools, *Lock, LeaderCallbacks: their zero value
		return reflect.Zero(at)
	}
}

// checkResult checks one result of a call on a nil or zero receiver.
func checkResult(t *testing.T, handle bool, rt reflect.Type, res reflect.Value) {
	t.Helper()
	switch {
	case rt == reflect.TypeFor[error]():
		if !handle {
			return // (*Error)(nil).Unwrap() is nil: nothing to unwrap
		}
		err, _ := res.Interface().(error)
		wantTyped(t, "error", err)
	case rt == reflect.TypeFor[context.Context]():
		ctx := res.Interface().(context.Context)
		if ctx.Err() == nil {
			t.Error("the context is not cancelled")
		}
		wantTyped(t, "context's cause", context.Cause(ctx))
	case rt == reflect.TypeFor[context.CancelFunc]():
		res.Interface().(context.CancelFunc)() // must not panic either
	case rt.Kind() == reflect.Chan:
		if _, ok := res.Recv(); ok {
			t.Error("Done yielded a value; want a closed channel")
		}
	case rt.Kind() == reflect.Func && strings.HasPrefix(rt.String(), "iter.Seq2["):
		var errs []error
		yield := reflect.MakeFunc(rt.In(0), func(a []reflect.Value) []reflect.Value {
			err, _ := a[1].Interface().(error)
			errs = append(errs, err)
			return []reflect.Value{reflect.ValueOf(true)}
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("the iterator panicked: %v", r)
				}
			}()
			res.Call([]reflect.Value{yield})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the iterator did not end")
		}
		if len(errs) != 1 {
			t.Fatalf("the iterator yielded %d times; want once", len(errs))
		}
		wantTyped(t, "yielded error", errs[0])
	case handle && !res.IsZero():
		t.Errorf("result %v; want the zero %v", res, rt)
	}
}

// wantTyped asserts a *ddblock.Error with a code: INVALID_ARGUMENT for
// most, LOCK_NOT_HELD for a guarded write through a Lock that is none.
func wantTyped(t *testing.T, what string, err error) {
	t.Helper()
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code == "" {
		t.Errorf("%s = %v; want a *ddblock.Error", what, err)
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeInvalidArgument {
		t.Errorf("%s = %v; want a *ddblock.Error of INVALID_ARGUMENT", what, err)
	}
}

// The zero values the issue names, each with the words it must say.
func TestZeroValuesSayWhy(t *testing.T) {
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"(&Client{}).AcquireLock": func() error { _, err := (&ddblock.Client{}).AcquireLock(ctx, "k"); return err },
		"(*Election)(nil).Campaign": func() error {
			_, err := (*ddblock.Election)(nil).Campaign(ctx, "v")
			return err
		},
		"(&Election{}).Campaign": func() error { _, err := (&ddblock.Election{}).Campaign(ctx, "v"); return err },
		"(&Election{}).Leader":   func() error { _, err := (&ddblock.Election{}).Leader(ctx); return err },
		"(&Semaphore{}).Acquire": func() error { _, err := (&ddblock.Semaphore{}).Acquire(ctx); return err },
		"(*Semaphore)(nil).TryAcquire": func() error {
			_, err := (*ddblock.Semaphore)(nil).TryAcquire(ctx)
			return err
		},
		"(*Lock)(nil).Release":       func() error { return (*ddblock.Lock)(nil).Release(ctx) },
		"(&Leadership{}).Context()":  func() error { return context.Cause((&ddblock.Leadership{}).Context()) },
		"(&Leadership{}).Proclaim()": func() error { return (&ddblock.Leadership{}).Proclaim(ctx, "v") },
	} {
		t.Run(name, func(t *testing.T) {
			err := call()
			wantInvalid(t, "error", err)
			if err != nil && !strings.Contains(err.Error(), "was not") {
				t.Errorf("%v: does not say what the value was not made by", err)
			}
		})
	}
	_, err := (&ddblock.Client{}).AcquireLock(ctx, "k")
	if !strings.Contains(fmtErr(err), "not made with New") || strings.Contains(fmtErr(err), "RetryPeriod") {
		t.Errorf("(&Client{}).AcquireLock: %v; want it to say the client was not made with New", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Up-front refusals of a real client: a semaphore name reserved for
// session items, a negative Observe period, NewElection and
// NewSemaphore after Close. None makes a call.
func TestRefusedUpFront(t *testing.T) {
	ctx := context.Background()
	c, err := ddblock.New(dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}),
		ddblock.WithTableName("locks"), ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewSemaphore("ddblock_session#x", 2); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("NewSemaphore of a session key: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.NewElection("ddblock_session#x"); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("NewElection of a session key: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.NewElection("svc", ddblock.WithElectionRetryPeriod(0)); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("NewElection with a zero retry period: %v; want INVALID_ARGUMENT", err)
	}
	e, err := c.NewElection("svc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for info, err := range e.Observe(ctx, -time.Second) {
		n++
		if info != nil || ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
			t.Errorf("Observe with a negative period: %v, %v; want INVALID_ARGUMENT", info, err)
		}
	}
	if n != 1 {
		t.Errorf("Observe with a negative period yielded %d times; want once", n)
	}
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewElection("svc"); ddblock.CodeOf(err) != ddblock.CodeClientShutdown {
		t.Errorf("NewElection after Close: %v; want CLIENT_SHUTDOWN", err)
	}
	if _, err := c.NewSemaphore("pool", 2); ddblock.CodeOf(err) != ddblock.CodeClientShutdown {
		t.Errorf("NewSemaphore after Close: %v; want CLIENT_SHUTDOWN", err)
	}
}

// The walk above covers every exported type of the package that has
// exported methods: the types are read from the package's source, so a
// new one fails here until it is added to handles or values.
func TestZeroValueWalkCoversEveryType(t *testing.T) {
	walked := map[string]bool{}
	for _, typ := range append(append([]reflect.Type(nil), handles...), values...) {
		walked[typ.Name()] = true
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			id, ok := recv.(*ast.Ident)
			if !ok || !id.IsExported() {
				continue
			}
			found++
			if !walked[id.Name] {
				t.Errorf("%s has exported methods (%s.%s) but TestZeroAndNilReceivers does not walk it", id.Name, id.Name, fn.Name.Name)
				walked[id.Name] = true // once per type
			}
		}
	}
	if found == 0 {
		t.Fatal("no exported method found in the package's source")
	}
}
