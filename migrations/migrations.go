// Package migrations owns the PostgreSQL schema: numbered SQL migrations embedded in the binary
// (001_workflow.sql, ...), applied by tern under its advisory lock, so controllers starting together
// do not race.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// VersionTable records the schema's version.
const VersionTable = "public.conclave_schema_version"

// ErrBehind is returned by Check for a database whose schema is older than this build's.
var ErrBehind = errors.New("the database schema is behind this build")

// Status is where a database's schema stands.
type Status struct {
	Current, Latest int32
	// Names of the migrations, by version (Names[0] is version 1's).
	Names []string
}

func migrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("schema version table: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return m, nil
}

// Up applies every migration not applied yet.
func Up(ctx context.Context, conn *pgx.Conn) error {
	m, err := migrator(ctx, conn)
	if err != nil {
		return err
	}
	return m.Migrate(ctx)
}

// Down takes the schema back to version to (0 drops everything Conclave created).
func Down(ctx context.Context, conn *pgx.Conn, to int32) error {
	m, err := migrator(ctx, conn)
	if err != nil {
		return err
	}
	return m.MigrateTo(ctx, to)
}

// Read returns where the schema stands.
func Read(ctx context.Context, conn *pgx.Conn) (Status, error) {
	m, err := migrator(ctx, conn)
	if err != nil {
		return Status{}, err
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("schema version: %w", err)
	}
	s := Status{Current: v, Latest: int32(len(m.Migrations))}
	for _, mg := range m.Migrations {
		s.Names = append(s.Names, mg.Name)
	}
	return s, nil
}

// Check returns ErrBehind, with what to do, when the schema is older than this build's.
func Check(ctx context.Context, conn *pgx.Conn) error {
	s, err := Read(ctx, conn)
	if err != nil {
		return err
	}
	if s.Current < s.Latest {
		return fmt.Errorf("%w: it is at version %d of %d; run `conclave migrate up`", ErrBehind, s.Current, s.Latest)
	}
	return nil
}
