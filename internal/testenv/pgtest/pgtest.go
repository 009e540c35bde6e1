// Package pgtest gives tests a database of their own on the PostgreSQL the services script provides
// (scripts/services.sh): created empty, migrated, and dropped when the test ends. Tests skip with a
// message where no PostgreSQL answers.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/internal/testenv"
	"github.com/conclave-ai/conclave/internal/testenv/netproxy"
	"github.com/conclave-ai/conclave/migrations"
	"github.com/jackc/pgx/v5"
)

// DefaultURL is the test database of scripts/services.sh; CONCLAVE_TEST_DATABASE_URL overrides it.
const DefaultURL = "postgres://conclave:conclave@127.0.0.1:5432/conclave_test?sslmode=disable"

// BaseURL returns the URL of the database tests connect to for creating theirs.
func BaseURL() string {
	if u := os.Getenv("CONCLAVE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// New creates a database for the test and returns its URL; migrated says whether to apply the
// migrations first.
func New(t testing.TB, migrated bool) secret.String {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := BaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		testenv.Missing(t, "PostgreSQL is not reachable at %s (run scripts/services.sh, or set CONCLAVE_TEST_DATABASE_URL): %v", redact(base), err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := "conclave_t_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dsn := secret.String(u.String())
	if migrated {
		conn, err := pgx.Connect(ctx, dsn.Reveal())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if err := migrations.Up(ctx, conn); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return dsn
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured URL"
	}
	return u.Redacted()
}

// NewProxy starts a proxy to the database of dsn and returns it with the dsn through it.
func NewProxy(t testing.TB, dsn secret.String) (*netproxy.Proxy, secret.String) {
	t.Helper()
	u, err := url.Parse(dsn.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	p := netproxy.New(t, u.Host)
	u.Host = p.Addr()
	return p, secret.String(u.String())
}
