// Package logging owns how Conclave logs: one zap logger, JSON by default, and the bridge that sends
// protoactor's slog output through it.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// New returns a logger writing to w at level in format "json" or "console".
func New(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = ISO8601
	var encoder zapcore.Encoder
	switch format {
	case "json", "":
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	var sink zapcore.WriteSyncer
	if b, ok := w.(*zapcore.BufferedWriteSyncer); ok {
		sink = b // it locks its buffer itself
	} else {
		sink = zapcore.Lock(zapcore.AddSync(w))
	}
	return zap.New(zapcore.NewCore(encoder, sink, lvl)), nil
}

// ISO8601 encodes a time as zap's ISO8601TimeEncoder does ("2006-01-02T15:04:05.000Z0700"), but
// formats each millisecond only once: a busy server writes dozens of lines a millisecond, and
// formatting each by its layout was a fifth of a line's cost.
func ISO8601(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	ms := t.UnixMilli()
	slot := &isoCache[uint64(ms)%uint64(len(isoCache))]
	c := slot.Load()
	if c == nil || c.ms != ms || c.loc != t.Location() {
		c = &isoTime{ms: ms, loc: t.Location(), s: t.Format("2006-01-02T15:04:05.000Z0700")}
		slot.Store(c)
	}
	enc.AppendString(c.s)
}

// isoTime is one formatted millisecond.
type isoTime struct {
	ms  int64
	loc *time.Location
	s   string
}

// isoCache holds recent formatted milliseconds by their value modulo its size: a line's time and the
// times it carries (a request's deadline) keep their own entries.
var isoCache [16]atomic.Pointer[isoTime]

// Buffer returns w behind a buffer of 256 KiB flushed every 100 ms and when full: a server writes
// about twenty lines per request, and one write each would cost a system call. Stop flushes it and
// must be called before the process ends; a crash loses at most the last 100 ms of lines. A flush
// writes to the operating system without forcing a file to disk: syncing a log file ten times a second
// was 4 % of a server's CPU at one connection, and a process that dies loses no line already written.
func Buffer(w io.Writer) *zapcore.BufferedWriteSyncer {
	return &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(writeOnly{w}), Size: 256 << 10, FlushInterval: 100 * time.Millisecond}
}

// writeOnly hides a writer's Sync from zapcore.AddSync.
type writeOnly struct{ io.Writer }

// ActorLogger bridges protoactor's slog logging into z. The library's chatter (actor started, dead
// letters) is debug-level for Conclave, so only its warnings and errors pass at info.
func ActorLogger(z *zap.Logger) actor.ConfigOption {
	core := z.Core()
	if !core.Enabled(zapcore.DebugLevel) {
		core = minLevel{core, zapcore.WarnLevel}
	}
	return actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return slog.New(zapslog.NewHandler(core)).With("lib", "protoactor")
	})
}

// minLevel raises a core's level.
type minLevel struct {
	zapcore.Core
	min zapcore.Level
}

func (m minLevel) Enabled(l zapcore.Level) bool { return l >= m.min && m.Core.Enabled(l) }

func (m minLevel) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !m.Enabled(e.Level) {
		return ce
	}
	return m.Core.Check(e, ce)
}

func (m minLevel) With(f []zapcore.Field) zapcore.Core { return minLevel{m.Core.With(f), m.min} }
