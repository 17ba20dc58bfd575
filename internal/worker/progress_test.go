package worker

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

// However many reports a job makes between two writes, one is written: its
// latest; a job whose outcome was written has its unwritten report dropped,
// unless it is a newer attempt's.
func TestProgressBufferCoalesces(t *testing.T) {
	var b progressBuffer
	var last docSource
	for i := range 1_000_000 {
		last.doc = []byte(strconv.Itoa(i))
		b.put(store.Lease{ID: 7, Token: 1}, &last)
	}
	b.put(store.Lease{ID: 3, Token: 1}, &docSource{doc: []byte("x")})
	got := b.take()
	require.Equal(t, []store.Progress{
		{Lease: store.Lease{ID: 3, Token: 1}, JSON: []byte("x")},
		{Lease: store.Lease{ID: 7, Token: 1}, JSON: []byte("999999")},
	}, got)
	require.Empty(t, b.take(), "taken reports are written once")

	b.put(store.Lease{ID: 7, Token: 1}, &docSource{doc: []byte("a")})
	b.put(store.Lease{ID: 8, Token: 2}, &docSource{doc: []byte("b")})
	b.forget([]*Job{
		{ClaimedRow: store.ClaimedRow{ID: 7, LeaseToken: 1}},
		{ClaimedRow: store.ClaimedRow{ID: 8, LeaseToken: 1}}, // an older attempt of 8
	})
	require.Equal(t, []store.Progress{{Lease: store.Lease{ID: 8, Token: 2}, JSON: []byte("b")}}, b.take())
}

// docSource is a ProgressSource holding one report.
type docSource struct{ doc []byte }

func (d *docSource) ProgressJSON() []byte { return d.doc }
