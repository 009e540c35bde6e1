// Package secret owns the handling of credentials: a string type that redacts itself wherever it could
// be printed, logged or serialised, so an API key cannot leak by accident.
package secret

import "log/slog"

// String holds a credential. Its formatted, logged and JSON forms are "[redacted]" (or empty when
// unset); only Reveal returns the value, for the one place that must send it.
type String string

const redacted = "[redacted]"

// Reveal returns the credential itself.
func (s String) Reveal() string { return string(s) }

// Set reports whether a credential is present.
func (s String) Set() bool { return s != "" }

func (s String) mask() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String implements fmt.Stringer.
func (s String) String() string { return s.mask() }

// GoString implements fmt.GoStringer (%#v).
func (s String) GoString() string { return `secret.String("` + s.mask() + `")` }

// MarshalText implements encoding.TextMarshaler, used by JSON and by zap's reflection encoder.
func (s String) MarshalText() ([]byte, error) { return []byte(s.mask()), nil }

// LogValue implements slog.LogValuer.
func (s String) LogValue() slog.Value { return slog.StringValue(s.mask()) }
