package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/conclave-ai/conclave/messages"
)

func recs(from, n int) []Entry {
	var out []*messages.Execution
	for i := from; i < from+n; i++ {
		out = append(out, &messages.Execution{RequestId: fmt.Sprint(i), Task: "task"})
	}
	return Records(out)
}

func ids(es []Entry) string {
	s := ""
	for _, e := range es {
		if e.Call != nil {
			s += "call:" + e.Call.CallId + ","
			continue
		}
		s += e.Record.RequestId + ","
	}
	return s
}

func TestRecordsComeBackInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dir", "records.spool")
	s, err := Open(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(recs(0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(recs(3, 2)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the spool is %v: others can read the tasks", fi.Mode().Perm())
	}
	got, off, err := s.Peek(2)
	if err != nil || ids(got) != "0,1," {
		t.Fatalf("peek %s, %v", ids(got), err)
	}
	s.Commit(off, len(got))
	if n, _ := s.Pending(); n != 3 {
		t.Fatalf("%d pending", n)
	}
	// A restart reads from the start again: the store takes each record once.
	s.Close()
	s, _ = Open(path, 1<<20)
	got, off, _ = s.Peek(10)
	if ids(got) != "0,1,2,3,4," {
		t.Fatalf("after a restart %s", ids(got))
	}
	if err := s.Commit(off, len(got)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("the spool keeps %d bytes once read back", fi.Size())
	}
	s.Close()
}

func TestATornWriteIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.spool")
	s, _ := Open(path, 1<<20)
	s.Append(recs(0, 2))
	s.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{0, 0, 0, 40, 1, 2, 3, 4, 'x'}) // a frame's header and a little of its body: a crash mid-write
	f.Close()
	s, err := Open(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, _ := s.Pending(); n != 2 {
		t.Fatalf("%d records after a torn write, want 2", n)
	}
	s.Append(recs(2, 1))
	got, _, err := s.Peek(10)
	if err != nil || ids(got) != "0,1,2," {
		t.Fatalf("%s, %v", ids(got), err)
	}
}

func TestAFullSpoolSaysSo(t *testing.T) {
	s, _ := Open(filepath.Join(t.TempDir(), "records.spool"), 100)
	defer s.Close()
	if err := s.Append(recs(0, 2)); err != nil {
		t.Fatal(err)
	}
	err := s.Append(recs(2, 10))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("over the limit: %v", err)
	}
	if n, _ := s.Pending(); n != 2 {
		t.Fatalf("%d records kept, want the 2 that fit", n)
	}
}

// TestCallsAndRecordsKeepTheirOrder spools a call's intent, its record and its settlement: they come
// back in the order they went in.
func TestCallsAndRecordsKeepTheirOrder(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "books.spool"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	open := &messages.Call{CallId: "r1/0", RequestId: "r1", State: "open", ReservedNanos: 5}
	settled := &messages.Call{CallId: "r1/0", RequestId: "r1", State: "settled", CostNanos: 3}
	if err := s.Append([]Entry{{Call: open}}); err != nil {
		t.Fatal(err)
	}
	s.Append(append(recs(1, 1), Entry{Call: settled}))
	got, _, err := s.Peek(10)
	if err != nil || ids(got) != "call:r1/0,1,call:r1/0," || got[0].Call.State != "open" || got[2].Call.CostNanos != 3 {
		t.Fatalf("%s, %v", ids(got), err)
	}
}

// TestASpoolOfRecordsAloneReads is a spool written before calls were spooled: its frames hold records
// with no kind before them.
func TestASpoolOfRecordsAloneReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.records")
	rec := &messages.Execution{RequestId: "old-1", Task: "task"}
	payload, _ := rec.MarshalVT()
	var h [headerBytes]byte
	binary.BigEndian.PutUint32(h[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[4:], crc32.Checksum(payload, table))
	if err := os.WriteFile(path, append(h[:], payload...), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.Peek(10)
	if err != nil || ids(got) != "old-1," {
		t.Fatalf("%s, %v", ids(got), err)
	}
}

// TestASpoolReadAsItIsWrittenStaysSmall writes and reads back a spool that is never empty at a
// commit: once the read position passes compactAt, the entries after it move to a new file, which
// keeps them in order, for this process and the next.
func TestASpoolReadAsItIsWrittenStaysSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.spool")
	s, err := Open(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	big := func(from, n int) []Entry {
		es := recs(from, n)
		for _, e := range es {
			e.Record.Answer = string(make([]byte, 64<<10))
		}
		return es
	}
	next := 0
	for i := range 400 { // about 25 MiB through, one entry always behind
		if err := s.Append(big(i, 1)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			continue
		}
		got, off, err := s.Peek(1)
		if err != nil || len(got) != 1 || got[0].Record.RequestId != fmt.Sprint(next) {
			t.Fatalf("read %d: %v %v", next, ids(got), err)
		}
		if err := s.Commit(off, 1); err != nil {
			t.Fatal(err)
		}
		next++
	}
	if fi, _ := os.Stat(path); fi.Size() > compactAt+(1<<20) {
		t.Fatalf("the spool is %d bytes: it was not compacted", fi.Size())
	}
	if n, _ := s.Pending(); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
	s.Close()
	s, err = Open(path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.Peek(1000)
	if err != nil || len(got) == 0 || got[len(got)-1].Record.RequestId != "399" {
		t.Fatalf("after a restart: %d entries, last %v, %v", len(got), ids(got[max(len(got)-1, 0):]), err)
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1].Record.RequestId, got[i].Record.RequestId
		var x, y int
		fmt.Sscan(a, &x)
		fmt.Sscan(b, &y)
		if y != x+1 {
			t.Fatalf("out of order after compaction: %s then %s", a, b)
		}
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the compaction's file is left: %v", err)
	}
}
