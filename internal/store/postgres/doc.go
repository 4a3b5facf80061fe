// Package postgres is the store.Store engine on PostgreSQL: the same store as internal/store/sqlite, for
// control planes that run on more than one machine or want a managed database. Its schema (migrations.go)
// mirrors the SQLite engine's, table for table and column for column.
package postgres
