package dashboard

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// The job page shows a job's metadata (escaped), in flight and dead, while
// its payload stays hidden.
func TestJobPageShowsMetadata(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	res, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.send",
		Payload:  map[string]string{"email": marker},
		Metadata: skiplock.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tag": hostile}})
	require.NoError(t, err)
	code, body := f.get(fmt.Sprintf("/jobs/%d", res.ID))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="metadata">{`)
	require.Contains(t, body, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	require.Contains(t, body, html.EscapeString(`<script>alert(`))
	require.NotContains(t, body, hostile, "metadata is escaped")
	require.NotContains(t, body, marker, "the payload stays hidden")

	_, err = f.client.JobCancel(ctx, res.ID)
	require.NoError(t, err)
	code, body = f.get(fmt.Sprintf("/jobs/%d", res.ID))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "st-dead")
	require.Contains(t, body, "0af7651916cd43dd8448eb211c80319c", "a dead letter keeps its metadata")

	plain, err := f.client.Enqueue(ctx, skiplock.EnqueueParams{Kind: "email.send"})
	require.NoError(t, err)
	code, body = f.get(fmt.Sprintf("/jobs/%d", plain.ID))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<p class="muted" id="metadata">None.</p>`)
}
