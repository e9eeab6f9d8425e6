// Package apifile describes a package's exported API, one declaration a
// line, sorted, in the spirit of the files in Go's own api/ directory:
// the file api/ddblock.txt at the repository's root is this description
// of package ddblock, and a test fails when the code and the file differ
// (go run ./internal/cmd/apifile rewrites it).
//
// It reads the source, not the types: parameter names are left out (a
// rename is not an API change), types are written as the source spells
// them, and a constant's value is given when the source gives one.
package apifile

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
)

// Describe returns the exported API of the package in dir (its non-test
// files for this platform), one declaration a line, sorted.
func Describe(dir string) ([]string, error) {
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	d := &describer{fset: fset, types: map[string]bool{}}
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	// Methods count only on exported types: collect those first.
	for _, f := range files {
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, spec := range g.Specs {
					if ts := spec.(*ast.TypeSpec); ts.Name.IsExported() {
						d.types[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				d.fn(decl)
			case *ast.GenDecl:
				d.gen(decl)
			}
		}
	}
	slices.Sort(d.lines)
	return slices.Compact(d.lines), nil
}

type describer struct {
	fset  *token.FileSet
	types map[string]bool
	lines []string
}

func (d *describer) add(format string, args ...any) {
	d.lines = append(d.lines, fmt.Sprintf(format, args...))
}

// expr prints an expression as the source spells it, on one line.
func (d *describer) expr(e ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, d.fset, e); err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// signature is a function type without parameter names.
func (d *describer) signature(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		var out []string
		if fl == nil {
			return out
		}
		for _, f := range fl.List {
			n := max(len(f.Names), 1)
			for range n {
				out = append(out, d.expr(f.Type))
			}
		}
		return out
	}
	s := d.typeParams(ft.TypeParams)
	s += "(" + strings.Join(list(ft.Params), ", ") + ")"
	switch res := list(ft.Results); len(res) {
	case 0:
	case 1:
		s += " " + res[0]
	default:
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}

// typeParams prints a type parameter list, names and constraints: "[K
// comparable, V any]", or nothing.
func (d *describer) typeParams(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		names := make([]string, len(f.Names))
		for i, n := range f.Names {
			names[i] = n.Name
		}
		parts = append(parts, strings.Join(names, ", ")+" "+d.expr(f.Type))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (d *describer) fn(f *ast.FuncDecl) {
	if !f.Name.IsExported() {
		return
	}
	if f.Recv == nil {
		d.add("func %s%s", f.Name.Name, d.signature(f.Type))
		return
	}
	recv := f.Recv.List[0].Type
	base := recv
	if star, ok := base.(*ast.StarExpr); ok {
		base = star.X
	}
	if idx, ok := base.(*ast.IndexExpr); ok {
		base = idx.X
	}
	if id, ok := base.(*ast.Ident); !ok || !d.types[id.Name] {
		return
	}
	d.add("method (%s) %s%s", d.expr(recv), f.Name.Name, d.signature(f.Type))
}

func (d *describer) gen(g *ast.GenDecl) {
	switch g.Tok {
	case token.TYPE:
		for _, spec := range g.Specs {
			d.typeSpec(spec.(*ast.TypeSpec))
		}
	case token.CONST, token.VAR:
		kind := "const"
		if g.Tok == token.VAR {
			kind = "var"
		}
		var lastType string // a const group repeats the type of the spec above
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if vs.Type != nil {
				lastType = d.expr(vs.Type)
			} else if len(vs.Values) > 0 {
				lastType = ""
			}
			for i, name := range vs.Names {
				if !name.IsExported() {
					continue
				}
				line := kind + " " + name.Name
				if lastType != "" {
					line += " " + lastType
				}
				if i < len(vs.Values) {
					line += " = " + d.expr(vs.Values[i])
				}
				d.add("%s", line)
			}
		}
	}
}

func (d *describer) typeSpec(ts *ast.TypeSpec) {
	if !ts.Name.IsExported() {
		return
	}
	name := ts.Name.Name + d.typeParams(ts.TypeParams)
	if ts.Assign.IsValid() {
		d.add("type %s = %s", name, d.expr(ts.Type))
		return
	}
	switch t := ts.Type.(type) {
	case *ast.StructType:
		d.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				if id := embeddedName(f.Type); id != nil && id.IsExported() {
					d.add("type %s struct, embedded %s", name, d.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					d.add("type %s struct, %s %s", name, n.Name, d.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		d.add("type %s interface", name)
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				d.add("type %s interface, embedded %s", name, d.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
					d.add("type %s interface, %s%s", name, n.Name, d.signature(ft))
				}
			}
		}
	default:
		d.add("type %s %s", name, d.expr(ts.Type))
	}
}

func embeddedName(e ast.Expr) *ast.Ident {
	switch t := e.(type) {
	case *ast.Ident:
		return t
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel
	}
	return nil
}
