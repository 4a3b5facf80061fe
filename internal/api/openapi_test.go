package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	apidoc "github.com/airlockrun/airlock/api"
)

// httpMethods are the keys of an OpenAPI path item that name operations.
var httpMethods = map[string]bool{
	"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true,
}

// openAPIDoc is the part of the OpenAPI document the tests read.
type openAPIDoc struct {
	OpenAPI string                    `yaml:"openapi"`
	Paths   map[string]map[string]any `yaml:"paths"`
}

func parseOpenAPI(t *testing.T) (openAPIDoc, map[string]any) {
	t.Helper()
	var doc openAPIDoc
	if err := yaml.Unmarshal(apidoc.OpenAPI, &doc); err != nil {
		t.Fatalf("parse api/openapi.yaml: %v", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(apidoc.OpenAPI, &raw); err != nil {
		t.Fatalf("parse api/openapi.yaml: %v", err)
	}
	return doc, raw
}

// docRoutes reports "METHOD /path" for every operation of the document.
func docRoutes(doc openAPIDoc) []string {
	var out []string
	for path, item := range doc.Paths {
		for key := range item {
			if httpMethods[key] {
				out = append(out, strings.ToUpper(key)+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIMatchesRoutes holds the OpenAPI document and the router to the same set of routes. ServeMux
// patterns and OpenAPI paths share the {name} syntax, so they compare as they are.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, _ := parseOpenAPI(t)

	inDoc := map[string]bool{}
	for _, r := range docRoutes(doc) {
		inDoc[r] = true
	}
	served := map[string]bool{}
	for _, r := range New(nil, nil, nil).Routes() {
		k := r.Method + " " + r.Pattern
		if served[k] {
			t.Errorf("router lists %s twice", k)
		}
		served[k] = true
	}
	if len(served) == 0 {
		t.Fatal("the router lists no routes")
	}

	var missingFromDoc, missingFromRouter []string
	for k := range served {
		if !inDoc[k] {
			missingFromDoc = append(missingFromDoc, k)
		}
	}
	for k := range inDoc {
		if !served[k] {
			missingFromRouter = append(missingFromRouter, k)
		}
	}
	slices.Sort(missingFromDoc)
	slices.Sort(missingFromRouter)
	for _, k := range missingFromDoc {
		t.Errorf("route %s is served but not described in api/openapi.yaml", k)
	}
	for _, k := range missingFromRouter {
		t.Errorf("route %s is described in api/openapi.yaml but not served", k)
	}
}

// TestOpenAPIDocument checks the document's own consistency: its version, that every operation has an
// operationId (unique) and responses, and that every $ref points at something that exists.
func TestOpenAPIDocument(t *testing.T) {
	doc, raw := parseOpenAPI(t)

	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi: got %q; want 3.1.x", doc.OpenAPI)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("the document has no paths")
	}

	ids := map[string]string{}
	for path, item := range doc.Paths {
		for key, v := range item {
			if !httpMethods[key] {
				continue
			}
			where := strings.ToUpper(key) + " " + path
			op, ok := v.(map[string]any)
			if !ok {
				t.Errorf("%s: operation is a %T; want a mapping", where, v)
				continue
			}
			resp, _ := op["responses"].(map[string]any)
			if len(resp) == 0 {
				t.Errorf("%s: no responses", where)
			}
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", where)
			} else if prev, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q is also used by %s", where, id, prev)
			} else {
				ids[id] = where
			}
			if strings.HasSuffix(path, "/stream") || strings.HasSuffix(path, "/attach") {
				if _, ok := resp["101"]; !ok {
					t.Errorf("%s: a WebSocket route must document its 101 response", where)
				}
			}
		}
	}

	for path, item := range doc.Paths {
		declared := map[string]bool{}
		for _, name := range pathParams(t, raw, item["parameters"]) {
			declared[name] = true
		}
		for key, v := range item {
			if !httpMethods[key] {
				continue
			}
			op, _ := v.(map[string]any)
			names := map[string]bool{}
			for n := range declared {
				names[n] = true
			}
			for _, name := range pathParams(t, raw, op["parameters"]) {
				names[name] = true
			}
			for _, seg := range strings.Split(path, "/") {
				if name, ok := strings.CutPrefix(seg, "{"); ok {
					name = strings.TrimSuffix(name, "}")
					if !names[name] {
						t.Errorf("%s %s: path parameter {%s} is not declared", strings.ToUpper(key), path, name)
					}
				}
			}
		}
	}

	for _, ref := range collectRefs(raw, nil) {
		if err := resolveRef(raw, ref); err != nil {
			t.Errorf("$ref %q: %v", ref, err)
		}
	}
}

// pathParams reports the names of the "in: path" parameters of a parameters list, following $refs.
func pathParams(t *testing.T, doc map[string]any, list any) []string {
	t.Helper()
	items, _ := list.([]any)
	var out []string
	for _, it := range items {
		p, _ := it.(map[string]any)
		if ref, ok := p["$ref"].(string); ok {
			target, err := lookupRef(doc, ref)
			if err != nil {
				t.Errorf("parameter $ref %q: %v", ref, err)
				continue
			}
			p, _ = target.(map[string]any)
		}
		if p["in"] == "path" {
			name, _ := p["name"].(string)
			out = append(out, name)
		}
	}
	return out
}

// collectRefs appends the value of every "$ref" key found anywhere below v.
func collectRefs(v any, out []string) []string {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "$ref" {
				out = append(out, s)
				continue
			}
			out = collectRefs(e, out)
		}
	case []any:
		for _, e := range v {
			out = collectRefs(e, out)
		}
	}
	return out
}

// resolveRef reports an error unless ref is a local JSON pointer ("#/a/b") that names a node of doc.
func resolveRef(doc map[string]any, ref string) error {
	_, err := lookupRef(doc, ref)
	return err
}

// lookupRef returns the node of doc that the local JSON pointer ref ("#/a/b") names.
func lookupRef(doc map[string]any, ref string) (any, error) {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("only local references are allowed")
	}
	var cur any = doc
	for _, part := range strings.Split(ptr, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q is not inside a mapping", part)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("no %q", part)
		}
	}
	return cur, nil
}
