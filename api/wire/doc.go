// Package wire is the wire schema of Airlock's public /v1 API: the request, response and event types
// that cross the wire as JSON, their constants (states, scopes, stream and event types), the error body,
// and the HTTP status of each error code. The server (internal/api), the Go SDK (which re-exports these
// types under its own names: airlock.Sandbox is wire.Sandbox) and the airlock command all use these
// types, so no side keeps a copy of the other's.
//
// The API's OpenAPI document (api/openapi.yaml) describes the same types; a test holds each type's
// JSON fields to its schema there. The error codes themselves, and the sentinel errors they name, are
// api/errcode's.
//
// Only the standard library is imported here, so that the SDK builds outside this module.
package wire
