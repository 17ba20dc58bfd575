package jsonerr

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A payload, task output or step result that does not decode into the
// reader's type is described by position and type, never quoted: it is the
// application's data, and the error text may be stored as the job's error
// and logged.
func TestTextDoesNotQuoteTheDocument(t *testing.T) {
	var target struct{ N int }
	err := json.Unmarshal([]byte(`{"N": 4111111111111111.5}`), &target)
	require.Error(t, err)
	require.Contains(t, err.Error(), "4111111111111111.5", "encoding/json quotes the number itself")
	text := Text(err)
	require.NotContains(t, text, "4111111111111111")
	require.Equal(t, "cannot store a JSON number in Go type int (field N) at byte offset 24", text)

	err = json.Unmarshal([]byte(`{"N": secret}`), &target)
	require.Error(t, err)
	require.Equal(t, "invalid JSON at byte offset 7", Text(err))
}
