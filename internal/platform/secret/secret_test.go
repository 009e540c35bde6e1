package secret

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestSecretNeverPrints(t *testing.T) {
	const key = "sk-live-0123456789"
	s := String(key)
	var logs bytes.Buffer
	z := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logs), zap.DebugLevel))
	z.Info("x", zap.Any("key", s), zap.Stringer("key2", s), zap.Any("cfg", struct{ Key String }{s}))
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "key", s)
	raw, _ := json.Marshal(map[string]any{"key": s})
	out := strings.Join([]string{fmt.Sprint(s), fmt.Sprintf("%v %s %q %#v %+v", s, s, s, s, struct{ K String }{s}), string(raw), logs.String()}, "\n")
	if strings.Contains(out, key) {
		t.Fatalf("the secret leaked:\n%s", out)
	}
	if !strings.Contains(out, "[redacted]") || s.Reveal() != key || !s.Set() {
		t.Fatalf("redaction or reveal broken:\n%s", out)
	}
	if String("").String() != "" {
		t.Fatal("an unset secret should print empty")
	}
}
