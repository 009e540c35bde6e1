// Package spool owns the recorder's write-ahead log: execution records and journaled calls, appended
// in order to one file readable by its owner only, synced, and read back in the same order as they are
// written to the store (at once while it answers, once it is back while it does not). Each entry is
// framed by its length and a CRC-32C, so a write torn by a crash is found and cut off at the next open
// rather than read as an entry.
package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/conclave-ai/conclave/messages"
)

// ErrFull is returned by Append when the records would take the spool past its size limit; none of
// them was written.
var ErrFull = errors.New("the spool is full")

const (
	headerBytes    = 8
	maxRecordBytes = 64 << 20
)

var table = crc32.MakeTable(crc32.Castagnoli)

// Spool is an append-only file of records with a read position. It is safe for concurrent use.
type Spool struct {
	mu      sync.Mutex
	path    string
	max     int64
	f       *os.File
	size    int64 // bytes of whole frames
	read    int64 // offset of the first record not read back
	records int   // records from read on
	// pending and pendingBytes publish records and size-read for Pending, which must not wait behind
	// an append's sync (its owner asks it from an actor's turn); set whenever those change.
	pending, pendingBytes atomic.Int64
}

// published makes the pending count readable without the lock; mu is held.
func (s *Spool) published() {
	s.pending.Store(int64(s.records))
	s.pendingBytes.Store(s.size - s.read)
}

// Open opens (or creates) the spool at path, holding at most max bytes. A torn last frame is cut off;
// the records before it are kept for reading back.
func Open(path string, max int64) (*Spool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{path: path, max: max, f: f}
	size, count, err := scan(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool %s: cut the torn end: %w", path, err)
	}
	s.size, s.records = size, count
	s.published()
	return s, nil
}

// scan counts the whole frames of a spool file and returns where they end.
func scan(f *os.File) (int64, int, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	r := bufio.NewReader(f)
	var off int64
	n := 0
	for {
		payload, err := readFrame(r)
		if err != nil { // io.EOF, or a torn or corrupt frame: the spool ends before it
			return off, n, nil
		}
		off += headerBytes + int64(len(payload))
		n++
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var h [headerBytes]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n > maxRecordBytes {
		return nil, errors.New("frame too large")
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, err
	}
	if crc32.Checksum(payload, table) != binary.BigEndian.Uint32(h[4:]) {
		return nil, errors.New("checksum mismatch")
	}
	return payload, nil
}

// Entry is one entry of the spool: a record, or a call of the journal (an intent or a settlement).
type Entry struct {
	Record *messages.Execution
	Call   *messages.Call
}

// An entry's payload starts with its kind. A record written before calls were spooled has no kind:
// its payload is the record's, whose first byte is its request id's tag (0x0a), never a kind.
const (
	kindRecord byte = 1
	kindCall   byte = 2
)

func (e Entry) encode() ([]byte, error) {
	if e.Call != nil {
		raw, err := e.Call.MarshalVT()
		return append([]byte{kindCall}, raw...), err
	}
	raw, err := e.Record.MarshalVT()
	return append([]byte{kindRecord}, raw...), err
}

func decode(payload []byte) (Entry, error) {
	var e Entry
	switch {
	case len(payload) > 0 && payload[0] == kindCall:
		e.Call = &messages.Call{}
		return e, e.Call.UnmarshalVT(payload[1:])
	case len(payload) > 0 && payload[0] == kindRecord:
		payload = payload[1:]
	}
	e.Record = &messages.Execution{}
	return e, e.Record.UnmarshalVT(payload)
}

// Records are records as entries.
func Records(records []*messages.Execution) []Entry {
	out := make([]Entry, len(records))
	for i, r := range records {
		out[i].Record = r
	}
	return out
}

func onlyCalls(entries []Entry) bool {
	for _, e := range entries {
		if e.Call == nil {
			return false
		}
	}
	return true
}

// Append writes entries at the end, in order, and syncs the file; all or none of them.
func (s *Spool) Append(entries []Entry) error {
	var buf []byte
	for _, e := range entries {
		payload, err := e.encode()
		if err != nil {
			return fmt.Errorf("spool: encode: %w", err)
		}
		var h [headerBytes]byte
		binary.BigEndian.PutUint32(h[:4], uint32(len(payload)))
		binary.BigEndian.PutUint32(h[4:], crc32.Checksum(payload, table))
		buf = append(append(buf, h[:]...), payload...)
	}
	limit := s.max
	if onlyCalls(entries) {
		// Calls carry money and are small: an eighth more room than records get is theirs, so that a
		// spool full of records still journals calls.
		limit += s.max / 8
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size+int64(len(buf)) > limit {
		return fmt.Errorf("%w: %d of %d bytes used, %d entries not kept", ErrFull, s.size, s.max, len(entries))
	}
	if _, err := s.f.WriteAt(buf, s.size); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.size += int64(len(buf))
	s.records += len(entries)
	s.published()
	return nil
}

// Peek reads up to n entries from the read position without moving it; Commit moves it past them.
func (s *Spool) Peek(n int) ([]Entry, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := bufio.NewReader(io.NewSectionReader(s.f, s.read, s.size-s.read))
	var out []Entry
	off := s.read
	for len(out) < n && off < s.size {
		payload, err := readFrame(r)
		if err != nil {
			return nil, 0, fmt.Errorf("spool %s at %d: %w", s.path, off, err)
		}
		e, err := decode(payload)
		if err != nil {
			return nil, 0, fmt.Errorf("spool %s at %d: %w", s.path, off, err)
		}
		out = append(out, e)
		off += headerBytes + int64(len(payload))
	}
	return out, off, nil
}

// compactAt is how far the read position goes before the entries after it are moved to a new file:
// a spool that is written to as it is read back is never empty at a Commit, and would otherwise grow
// to its limit.
const compactAt = 8 << 20

// Commit marks the records before offset (from Peek) as written; once every record is, the file is
// emptied. The read position is not kept on disk: after a crash, the entries read back since the
// last emptying are read again, and the store takes each once.
func (s *Spool) Commit(offset int64, records int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.published()
	s.read, s.records = offset, max(s.records-records, 0)
	switch {
	case s.read >= s.size:
		s.read, s.size, s.records = 0, 0, 0
		if err := s.f.Truncate(0); err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		return s.f.Sync()
	case s.read >= compactAt:
		return s.compact()
	}
	return nil
}

// compact moves the entries not read back to a new file that replaces the spool: written and synced
// before the rename, so a crash leaves one file or the other, whole.
func (s *Spool) compact() error {
	tmp := s.path + ".compact"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: compact: %w", err)
	}
	tail := s.size - s.read
	_, err = io.Copy(f, io.NewSectionReader(s.f, s.read, tail))
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("spool: compact: %w", err)
	}
	s.f.Close()
	s.f, s.read, s.size = f, 0, tail
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Pending returns the records and bytes not read back yet.
func (s *Spool) Pending() (records int, bytes int64) {
	return int(s.pending.Load()), s.pendingBytes.Load()
}

// Path returns the spool file's path.
func (s *Spool) Path() string { return s.path }

// Close closes the file; the records not read back stay in it for the next Open.
func (s *Spool) Close() error { return s.f.Close() }
