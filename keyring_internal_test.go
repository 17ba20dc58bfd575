package skiplock

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/store"
)

func testKeyring(t testing.TB) *Keyring {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	_, err := KeyringAddKey(path, "")
	require.NoError(t, err)
	k, err := LoadKeyring(path)
	require.NoError(t, err)
	return k
}

// An envelope opens to its plaintext, is valid JSON a jsonb column keeps as
// it is (one member, printed as jsonb prints it), and any altered byte of it
// or another key of the same id fails to open it, naming the key.
func TestSealOpen(t *testing.T) {
	k := testKeyring(t)
	plain := []byte(`{"email": "ann@example.com"}`)
	env, err := k.seal(plain, "")
	require.NoError(t, err)
	require.True(t, isEnvelope(env))
	require.NoError(t, ValidatePayload(env, 0))
	require.NotContains(t, string(env), "ann@example.com")
	got, err := k.open(env)
	require.NoError(t, err)
	require.Equal(t, plain, got)
	require.False(t, isEnvelope(plain))

	// One character of the data changed, to another of base64url's (a
	// flipped bit could leave the alphabet: '-' became ',', and the test
	// failed on the decoding instead of the authentication, once in a while
	// with a random nonce).
	i := len(env) - 10
	bad := append([]byte(nil), env...)
	if bad[i] == 'A' {
		bad[i] = 'B'
	} else {
		bad[i] = 'A'
	}
	_, err = k.open(bad)
	require.ErrorContains(t, err, "does not open with it")

	// Another keyring with a key of the same id.
	other := testKeyring(t)
	other.aeads[k.current] = other.aeads[other.current]
	_, err = other.open(env)
	require.ErrorContains(t, err, `sealed with key "`+k.current+`", does not open`)
}

// A keyring printed (a Config logged with %v, %+v or %#v) shows no key.
func TestKeyringPrintsNoKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	_, err := KeyringAddKey(path, "")
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f keyringFile
	require.NoError(t, json.Unmarshal(data, &f))
	k, err := LoadKeyring(path)
	require.NoError(t, err)
	for _, format := range []string{"%v", "%+v", "%#v"} {
		out := fmt.Sprintf(format, Config{Encryption: k})
		require.NotContains(t, out, f.Keys[0].Key, format)
		require.Contains(t, out, "skiplock.Keyring{current: "+f.Current, format)
	}
}

// The CPU cost of sealing and opening a 1 KiB payload, for the figures in
// docs/security.md.
func BenchmarkSealOpen1KiB(b *testing.B) {
	k := testKeyring(b)
	plain := []byte(`{"p":"` + strings.Repeat("x", 1024-8) + `"}`)
	b.SetBytes(int64(len(plain)))
	for i := 0; i < b.N; i++ {
		env, err := k.seal(plain, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.open(env); err != nil {
			b.Fatal(err)
		}
	}
}

// A job stored split (migration 24) comes back from a claim as its key id
// in payload, printed by jsonb, and its bytes: envelopeParts reads the id
// from either print, and refuses anything else beside sealed bytes.
func TestEnvelopePartsSplit(t *testing.T) {
	data := []byte{1, 2, 3}
	for _, raw := range []string{`{"skiplock_encrypted": "v1.k-1_a"}`, `{"skiplock_encrypted":"v1.k-1_a"}`,
		`{ "skiplock_encrypted" : "v1.k-1_a" }`} {
		id, got, err := envelopeParts([]byte(raw), data)
		require.NoError(t, err, raw)
		require.Equal(t, "k-1_a", id, raw)
		require.Equal(t, data, got, raw)
	}
	for _, raw := range []string{`{"skiplock_encrypted": "v1.k1", "x": "y"}`, `{"skiplock_encrypted": "v1.k1.AQID"}`,
		`{"skiplock_encrypted": "v2.k1"}`, `{"a": 1}`, `{"skiplock_encrypted": "v1."}`, `not json`} {
		_, _, err := envelopeParts([]byte(raw), data)
		require.Error(t, err, raw)
	}
	// And wholePayload joins them back into the envelope a client seals.
	id, sealed := "k1", []byte("0123456789abcdef0123456789ab")
	whole, err := wholePayload(store.EnqueueArgs{Payload: keyIDPayload(id), Sealed: sealed})
	require.NoError(t, err)
	gotID, gotSealed, err := parseEnvelope([]byte(whole))
	require.NoError(t, err)
	require.Equal(t, id, gotID)
	require.Equal(t, sealed, gotSealed)
	_, err = wholePayload(store.EnqueueArgs{Payload: `{"a": 1}`, Sealed: sealed})
	require.Error(t, err, "bytes beside a payload that names no key")
}
