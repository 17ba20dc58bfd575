package dashboard

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
)

// FuzzHTTPInputs sends arbitrary query strings and path ids to the pages
// that take user input. Whatever comes in, the answer is a page (200), a
// clear refusal (400/404) or a redirect, never a server error, and never a
// payload: bad input is the user's mistake, not an outage, and it must not
// become a way to read personal data.
func FuzzHTTPInputs(f *testing.F) {
	f.Add("/jobs", "id=1&state=ready&limit=10")
	f.Add("/jobs", "id=-1")
	f.Add("/jobs", "id=99999999999999999999999")
	f.Add("/jobs", "state=%00&queue=%ff%fe&kind='; DROP TABLE x;--")
	f.Add("/jobs", "before=0&limit=501")
	f.Add("/jobs", "tenant="+strings.Repeat("t", 5000))
	f.Add("/jobs/1", "")
	f.Add("/jobs/0", "")
	f.Add("/jobs/abc", "")
	f.Add("/dead", "kind=email.send&limit=1")
	f.Add("/dead", "flash=<script>alert(1)</script>")
	f.Add("/queues", "")

	db := dbtest.New(f)
	h, err := New(db.Pool, Options{Schema: db.Schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.(*Dashboard).Close() })
	c, err := skiplock.NewClient(db.Pool, skiplock.Config{Schema: db.Schema})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), skiplock.EnqueueParams{Queue: "mail", Kind: "email.send",
		Payload: map[string]string{"email": marker}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\x00\r\n") {
			return // not a request line a client could send
		}
		u := &url.URL{Path: path, RawQuery: query}
		req, err := http.NewRequest(http.MethodGet, u.String(), nil)
		if err != nil {
			return
		}
		req.Host = "127.0.0.1" // past the host check, to the pages
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("GET %s: status %d\n%s", u, rec.Code, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), marker) {
			t.Fatalf("GET %s: the page shows a payload", u)
		}
	})
}
