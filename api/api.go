// Package api holds the public HTTP API's OpenAPI 3.1 document, embedded so that the server can serve it at
// GET /v1/openapi.yaml and tests can hold the router to it.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document (YAML) that describes every route of the /v1 API.
//
//go:embed openapi.yaml
var OpenAPI []byte
