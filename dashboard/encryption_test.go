package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// A sealed payload (skiplock.Config.Encryption): the job's page never holds
// it; a reveal shows the envelope, or, with Options.Encryption, the
// plaintext.
func TestRevealSealedPayload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	_, err := skiplock.KeyringAddKey(path, "")
	require.NoError(t, err)
	ring, err := skiplock.LoadKeyring(path)
	require.NoError(t, err)
	auth := basicAuth("alice", "pw")
	sameOrigin := http.Header{"Sec-Fetch-Site": {"same-origin"}, "Authorization": auth["Authorization"]}
	for _, keyed := range []bool{false, true} {
		opts := Options{ShowPayloads: true, User: "alice", Password: "pw"}
		if keyed {
			opts.Encryption = ring
		}
		f := newFixture(t, opts)
		sealer, err := skiplock.NewClient(f.db.Pool, skiplock.Config{Schema: f.db.Schema, Encryption: ring})
		require.NoError(t, err)
		res, err := sealer.Enqueue(context.Background(), skiplock.EnqueueParams{Kind: "k",
			Payload: map[string]string{"email": marker}})
		require.NoError(t, err)
		id := fmt.Sprint(res.ID)
		rec := f.serve(http.MethodGet, "/jobs/"+id, "127.0.0.1", nil, auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.NotContains(t, rec.Body.String(), marker)
		rec = f.serve(http.MethodPost, "/jobs/"+id+"/payload", "127.0.0.1", url.Values{}, sameOrigin)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		if keyed {
			require.Contains(t, rec.Body.String(), marker)
		} else {
			require.NotContains(t, rec.Body.String(), marker)
			require.Contains(t, rec.Body.String(), "skiplock_encrypted")
		}
	}
}
