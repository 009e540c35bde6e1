// Package spool owns the recorder's file of last resort: execution records that could not reach the
// store, appended in order to one file readable by its owner only and read back in the same order.
// Each record is framed by its length and a CRC-32C, so a write torn by a crash is found and cut off
// at the next open rather than read as a record.
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

// Append writes records at the end, in order, and syncs the file; all or none of them.
func (s *Spool) Append(records []*messages.Execution) error {
	var buf []byte
	for _, r := range records {
		payload, err := r.MarshalVT()
		if err != nil {
			return fmt.Errorf("spool: encode %s: %w", r.RequestId, err)
		}
		var h [headerBytes]byte
		binary.BigEndian.PutUint32(h[:4], uint32(len(payload)))
		binary.BigEndian.PutUint32(h[4:], crc32.Checksum(payload, table))
		buf = append(append(buf, h[:]...), payload...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size+int64(len(buf)) > s.max {
		return fmt.Errorf("%w: %d of %d bytes used, %d records not kept", ErrFull, s.size, s.max, len(records))
	}
	if _, err := s.f.WriteAt(buf, s.size); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.size += int64(len(buf))
	s.records += len(records)
	return nil
}

// Peek reads up to n records from the read position without moving it; Commit moves it past them.
func (s *Spool) Peek(n int) ([]*messages.Execution, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := bufio.NewReader(io.NewSectionReader(s.f, s.read, s.size-s.read))
	var out []*messages.Execution
	off := s.read
	for len(out) < n && off < s.size {
		payload, err := readFrame(r)
		if err != nil {
			return nil, 0, fmt.Errorf("spool %s at %d: %w", s.path, off, err)
		}
		rec := &messages.Execution{}
		if err := rec.UnmarshalVT(payload); err != nil {
			return nil, 0, fmt.Errorf("spool %s at %d: %w", s.path, off, err)
		}
		out = append(out, rec)
		off += headerBytes + int64(len(payload))
	}
	return out, off, nil
}

// Commit marks the records before offset (from Peek) as written; once every record is, the file is
// emptied.
func (s *Spool) Commit(offset int64, records int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.read, s.records = offset, max(s.records-records, 0)
	if s.read < s.size {
		return nil
	}
	s.read, s.size, s.records = 0, 0, 0
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return s.f.Sync()
}

// Pending returns the records and bytes not read back yet.
func (s *Spool) Pending() (records int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records, s.size - s.read
}

// Path returns the spool file's path.
func (s *Spool) Path() string { return s.path }

// Close closes the file; the records not read back stay in it for the next Open.
func (s *Spool) Close() error { return s.f.Close() }
