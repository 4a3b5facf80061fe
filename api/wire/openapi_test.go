package wire_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/airlockrun/airlock/api"
	"github.com/airlockrun/airlock/api/errcode"
)

// The wire types are held to api/openapi.yaml: each struct type of this package is described by the
// schema of its name in components/schemas (schemaOf), with the same properties (the JSON names of its
// fields, embedded structs' included), each of the kind the field's Go type encodes to, and the
// required-ness its omitempty allows; every schema is a wire type's (or is named in docOnly); and the
// enumerations of the document (error codes, states, scopes, …) are this package's and api/errcode's.
// The types are read from this package's source, so a type added here is checked without a list to
// keep.

// schemaOf names the schema of a type whose schema has another name.
var schemaOf = map[string]string{
	"ErrorBody": "Error",
}

// docOnly are the schemas that describe no struct type of this package, and why.
var docOnly = map[string]string{
	"SandboxState": "an enumeration: Sandbox.State's values (the State constants)",
}

// wireType is a struct type of this package as its source declares it.
type wireType struct {
	name   string
	fields []wireField
}

// wireField is a field as JSON sees it: embedded structs are flattened into their fields.
type wireField struct {
	goName    string
	json      string
	omitempty bool
	typ       ast.Expr
}

// wirePackage is what the tests read of this package's source.
type wirePackage struct {
	structs map[string]*ast.StructType
	others  map[string]ast.Expr // non-struct named types (PortRange string)
	consts  map[string]string   // the string constants, by name
}

func loadWirePackage(t *testing.T) wirePackage {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	p := wirePackage{structs: map[string]*ast.StructType{}, others: map[string]ast.Expr{}, consts: map[string]string{}}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if st, ok := s.Type.(*ast.StructType); ok {
						p.structs[s.Name.Name] = st
					} else {
						p.others[s.Name.Name] = s.Type
					}
				case *ast.ValueSpec:
					for i, n := range s.Names {
						if i < len(s.Values) {
							if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								p.consts[n.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
	}
	if len(p.structs) == 0 {
		t.Fatal("found no struct types in the package's source")
	}
	return p
}

// openAPI is the document's components/schemas, parsed, and the schemas clients send.
type openAPI struct {
	schemas map[string]any
	// sent are the schemas of what clients send (request bodies, a WebSocket's client messages) and
	// the schemas those refer to: a property they leave out may be absent, whatever a response does.
	sent map[string]bool
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	var doc struct {
		Paths      map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("parse api/openapi.yaml: %v", err)
	}
	if len(doc.Components.Schemas) == 0 {
		t.Fatal("api/openapi.yaml has no components/schemas")
	}
	o := openAPI{schemas: doc.Components.Schemas, sent: map[string]bool{}}
	var sends func(v any)
	sends = func(v any) { // marks every schema v refers to, and what those refer to
		switch v := v.(type) {
		case map[string]any:
			if _, name := o.resolve(v); name != "" {
				if !o.sent[name] {
					o.sent[name] = true
					sends(o.schemas[name])
				}
				return
			}
			for _, e := range v {
				sends(e)
			}
		case []any:
			for _, e := range v {
				sends(e)
			}
		}
	}
	for _, item := range doc.Paths {
		for _, op := range item {
			op, _ := op.(map[string]any)
			sends(op["requestBody"])
			ws, _ := op["x-websocket"].(map[string]any)
			sends(ws["clientMessages"])
		}
	}
	if len(o.sent) == 0 {
		t.Fatal("api/openapi.yaml: found no request bodies")
	}
	return o
}

// resolve follows a local $ref to a schema of components/schemas.
func (o openAPI) resolve(s map[string]any) (map[string]any, string) {
	ref, _ := s["$ref"].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if !ok {
		return s, ""
	}
	target, _ := o.schemas[name].(map[string]any)
	return target, name
}

// objectShape is what an object schema says of its properties: each property's schema, which are
// required, and whether the required list can be told (not for a oneOf of alternatives).
type objectShape struct {
	props       map[string]map[string]any
	required    map[string]bool
	knowsNeeded bool
}

// shape collects the properties of an object schema, through allOf (every part holds) and oneOf
// (any alternative may: the union of their properties, required-ness unknown).
func (o openAPI) shape(s map[string]any) objectShape {
	sh := objectShape{props: map[string]map[string]any{}, required: map[string]bool{}, knowsNeeded: true}
	var walk func(s map[string]any, union bool)
	walk = func(s map[string]any, union bool) {
		s, _ = o.resolve(s)
		if s == nil {
			return
		}
		props, _ := s["properties"].(map[string]any)
		for k, v := range props {
			ps, _ := v.(map[string]any)
			sh.props[k] = ps
		}
		if !union {
			req, _ := s["required"].([]any)
			for _, r := range req {
				sh.required[fmt.Sprint(r)] = true
			}
		}
		for _, key := range []string{"allOf", "oneOf"} {
			parts, _ := s[key].([]any)
			if key == "oneOf" && len(parts) > 0 {
				sh.knowsNeeded = false
			}
			for _, part := range parts {
				ps, _ := part.(map[string]any)
				walk(ps, union || key == "oneOf")
			}
		}
	}
	walk(s, false)
	return sh
}

// TestTypesMatchOpenAPI holds every struct type of the package to its schema in api/openapi.yaml, and
// every schema to a type. A type is described by a schema of its name, or inline where a described
// type's field holds it, or by the fields it lends a described type that embeds it.
func TestTypesMatchOpenAPI(t *testing.T) {
	c := &checker{pkg: loadWirePackage(t), doc: loadOpenAPI(t), described: map[string]bool{}}
	names := make([]string, 0, len(c.pkg.structs))
	for name := range c.pkg.structs {
		names = append(names, name)
	}
	slices.Sort(names)
	named := map[string]bool{}
	for _, name := range names {
		schemaName := name
		if s, ok := schemaOf[name]; ok {
			schemaName = s
		}
		raw, ok := c.doc.schemas[schemaName].(map[string]any)
		if !ok {
			continue
		}
		named[schemaName] = true
		t.Run(name, func(t *testing.T) {
			c.check(t, name, "components/schemas/"+schemaName, raw, !c.doc.sent[schemaName])
		})
	}
	for _, name := range names {
		if ast.IsExported(name) && !c.described[name] {
			t.Errorf("wire.%s is not described in api/openapi.yaml: add components/schemas/%s", name, name)
		}
	}
	for name := range c.doc.schemas {
		if !named[name] && docOnly[name] == "" {
			t.Errorf("components/schemas/%s describes no type of package wire: add the type, or name it in docOnly with the reason", name)
		}
	}
	for name := range docOnly {
		if named[name] || c.doc.schemas[name] == nil {
			t.Errorf("docOnly names %s, which is a wire type's schema or no schema: delete it from docOnly", name)
		}
	}
}

// checker compares types with schemas, and notes the types it compared.
type checker struct {
	pkg       wirePackage
	doc       openAPI
	described map[string]bool
}

// check compares one type's JSON fields with the properties of the schema at where. Of a schema only
// responses hold, every property the type always encodes (it is not omitempty) is to be required.
func (c *checker) check(t *testing.T, name, where string, raw map[string]any, responseOnly bool) {
	t.Helper()
	c.described[name] = true
	sh := c.doc.shape(raw)
	seen := map[string]bool{}
	for _, f := range c.fields(t, name) {
		if seen[f.json] {
			t.Errorf("wire.%s has two fields named %q in JSON", name, f.json)
		}
		seen[f.json] = true
		ps, ok := sh.props[f.json]
		if !ok {
			t.Errorf("wire.%s.%s (%q) is not a property of %s", name, f.goName, f.json, where)
			continue
		}
		if sh.knowsNeeded && sh.required[f.json] && f.omitempty {
			t.Errorf("%s requires %q, but wire.%s.%s is omitempty: it is left out when empty", where, f.json, name, f.goName)
		}
		if sh.knowsNeeded && responseOnly && !sh.required[f.json] && !f.omitempty {
			t.Errorf("%s does not require %q, but wire.%s.%s is always there (not omitempty): require it", where, f.json, name, f.goName)
		}
		if msg := c.kindMismatch(t, f.typ, ps, where+"/properties/"+f.json, responseOnly); msg != "" {
			t.Errorf("wire.%s.%s (%q): %s", name, f.goName, f.json, msg)
		}
	}
	var missing []string
	for p := range sh.props {
		if !seen[p] {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	for _, p := range missing {
		t.Errorf("%s has property %q, which wire.%s has no field for", where, p, name)
	}
	for r := range sh.required {
		if _, ok := sh.props[r]; !ok {
			t.Errorf("%s requires %q, which it does not describe", where, r)
		}
	}
}

// fields returns the JSON fields of the struct type name, flattening embedded structs (which count as
// described by the schema of the type that embeds them).
func (c *checker) fields(t *testing.T, name string) []wireField {
	t.Helper()
	var out []wireField
	for _, f := range c.pkg.structs[name].Fields.List {
		tag := ""
		if f.Tag != nil {
			s, _ := strconv.Unquote(f.Tag.Value)
			tag = reflect.StructTag(s).Get("json")
		}
		if len(f.Names) == 0 { // embedded
			emb, ok := f.Type.(*ast.Ident)
			if !ok || c.pkg.structs[emb.Name] == nil {
				t.Errorf("wire.%s embeds %s, which is not a struct of this package", name, exprString(f.Type))
				continue
			}
			if tag == "" {
				c.described[emb.Name] = true
				out = append(out, c.fields(t, emb.Name)...)
				continue
			}
			f.Names = []*ast.Ident{emb}
		}
		for _, n := range f.Names {
			if !n.IsExported() || tag == "-" {
				continue
			}
			jsonName, opts, _ := strings.Cut(tag, ",")
			if jsonName == "" {
				t.Errorf("wire.%s.%s has no JSON name in its tag: every wire field names itself", name, n.Name)
				continue
			}
			out = append(out, wireField{goName: n.Name, json: jsonName, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
		}
	}
	return out
}

// kindMismatch reports how the JSON a Go type encodes to disagrees with the property schema ps (at
// where), or "". A field of a struct type of the package refers to that type's schema, or describes
// it inline (then the inline schema is checked as the type's).
func (c *checker) kindMismatch(t *testing.T, typ ast.Expr, ps map[string]any, where string, responseOnly bool) string {
	t.Helper()
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	want := jsonKind(c.pkg, typ)
	if want == "any" {
		return ""
	}
	target, refName := c.doc.resolve(ps)
	if id, ok := typ.(*ast.Ident); ok && c.pkg.structs[id.Name] != nil {
		switch {
		case refName == "" && target != nil:
			c.check(t, id.Name, where, target, responseOnly)
			return ""
		case refName == id.Name || refName == schemaOf[id.Name]:
			return ""
		default:
			return fmt.Sprintf("a %s, but the schema refers to %s", id.Name, refName)
		}
	}
	if target == nil {
		return fmt.Sprintf("the schema's $ref %v names no schema", ps["$ref"])
	}
	got := schemaKinds(c.doc, target)
	if len(got) == 0 {
		return "" // the schema leaves the kind open
	}
	if !got[want] && !(want == "integer" && got["number"]) {
		return fmt.Sprintf("encodes to a JSON %s, but the schema says %v", want, keys(got))
	}
	if arr, ok := typ.(*ast.ArrayType); ok && want == "array" {
		if items, ok := target["items"].(map[string]any); ok {
			if msg := c.kindMismatch(t, arr.Elt, items, where+"/items", responseOnly); msg != "" {
				return "items: " + msg
			}
		}
	}
	return ""
}

// jsonKind is the JSON type a Go type of the package encodes to, or "any" where the test cannot tell.
func jsonKind(pkg wirePackage, typ ast.Expr) string {
	switch typ := typ.(type) {
	case *ast.Ident:
		switch typ.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int32", "int64", "uint", "uint32", "uint64", "byte":
			return "integer"
		case "float32", "float64":
			return "number"
		}
		if pkg.structs[typ.Name] != nil {
			return "object"
		}
		if typ.Name == "PortRange" {
			return "any" // a number or a string (its MarshalJSON)
		}
		if under, ok := pkg.others[typ.Name]; ok {
			return jsonKind(pkg, under)
		}
	case *ast.SelectorExpr:
		switch exprString(typ) {
		case "time.Time":
			return "string"
		case "json.RawMessage":
			return "any"
		}
	case *ast.ArrayType:
		if id, ok := typ.Elt.(*ast.Ident); ok && id.Name == "byte" {
			return "string" // base64
		}
		return "array"
	case *ast.MapType:
		return "object"
	case *ast.StarExpr:
		return jsonKind(pkg, typ.X)
	}
	return "any"
}

// schemaKinds reports the JSON types a schema allows (empty: it does not say), through oneOf and anyOf.
func schemaKinds(doc openAPI, s map[string]any) map[string]bool {
	out := map[string]bool{}
	s, _ = doc.resolve(s)
	if s == nil {
		return out
	}
	switch ty := s["type"].(type) {
	case string:
		out[ty] = true
	case []any:
		for _, x := range ty {
			out[fmt.Sprint(x)] = true
		}
	}
	if _, ok := s["properties"]; ok && len(out) == 0 {
		out["object"] = true
	}
	for _, key := range []string{"oneOf", "anyOf", "allOf"} {
		parts, _ := s[key].([]any)
		for _, part := range parts {
			ps, _ := part.(map[string]any)
			for k := range schemaKinds(doc, ps) {
				out[k] = true
			}
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	}
	return fmt.Sprintf("%T", e)
}

// TestEnumsMatchOpenAPI holds the document's enumerations to the constants they list: the error codes
// to api/errcode's, and the states, scopes and kinds to this package's constants of each prefix.
func TestEnumsMatchOpenAPI(t *testing.T) {
	pkg := loadWirePackage(t)
	doc := loadOpenAPI(t)
	consts := func(prefix string) []string {
		var out []string
		for name, v := range pkg.consts {
			if strings.HasPrefix(name, prefix) {
				out = append(out, v)
			}
		}
		return out
	}
	for _, tc := range []struct {
		path string // schema, then properties (and "items")
		want []string
	}{
		{"ErrorDetail.code", errcode.Codes()},
		{"SandboxState", consts("State")},
		{"Session.state", consts("Session")},
		{"CreateAPIKeyRequest.scope", consts("Scope")},
		{"AccessToken.scopes.items", consts("TokenScope")},
		{"Flow.decision", consts("Decision")},
		{"Flow.protocol", consts("Protocol")},
		{"CodeEvent.type", consts("CodeEvent")},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, err := enumAt(doc, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) == 0 {
				t.Fatal("no constants to compare with")
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("api/openapi.yaml's enum at %s: got %q; want %q", tc.path, got, want)
			}
		})
	}
}

// enumAt returns the enum of the schema at path: a schema's name, then property names, "items" for an
// array's items.
func enumAt(doc openAPI, path string) ([]string, error) {
	parts := strings.Split(path, ".")
	s, _ := doc.schemas[parts[0]].(map[string]any)
	for _, p := range parts[1:] {
		if s == nil {
			break
		}
		if p == "items" {
			s, _ = s["items"].(map[string]any)
		} else {
			s = doc.shape(s).props[p]
		}
		s, _ = doc.resolve(s)
	}
	if s == nil {
		return nil, fmt.Errorf("api/openapi.yaml has no schema at %s", path)
	}
	enum, _ := s["enum"].([]any)
	if len(enum) == 0 {
		return nil, fmt.Errorf("the schema at %s has no enum", path)
	}
	out := make([]string, len(enum))
	for i, v := range enum {
		out[i] = fmt.Sprint(v)
	}
	return out, nil
}
