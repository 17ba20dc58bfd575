package skiplock

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/store"
)

// Payload encryption at rest (issue 38 §3, docs/security.md "Payload
// encryption"). A client with Config.Encryption seals every payload it
// enqueues with AES-256-GCM (crypto/cipher) under the keyring's key for the
// job's tenant, or its current key, and stores the envelope
//
//	{"skiplock_encrypted": "v1.KEYID.BASE64URL(nonce || ciphertext || tag)"}
//
// in place of the payload; a worker opens it before the middleware and the
// handler see the job. The key id is authenticated (additional data), so an
// envelope cannot be passed off as sealed under another key. Plain payloads
// and envelopes coexist: a payload is opened only if it is an envelope.
//
// What a handler writes beside its job is sealed the same way (sealRunData,
// openRunData): a workflow task's output and a step's result under the key
// of the job's tenant; a signal's payload under the sender's current key
// (SignalSendTx: the sender does not know its receiver's tenant).

// encryptedField is the envelope's one member.
const encryptedField = "skiplock_encrypted"

// envelopePrefix is how jsonb prints an envelope (the only member, one
// space after the colon): the cheap test before parsing. compactPrefix is
// how encoding/json writes it, within an object it marshals (a signal
// wait's checkpoint, held by its run before the database printed it).
var (
	envelopePrefix = []byte(`{"` + encryptedField + `": "`)
	compactPrefix  = []byte(`{"` + encryptedField + `":"`)
)

// keyIDRe bounds key ids to what a file, a log line and the envelope's
// dot-separated form carry safely.
var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Keyring holds the keys that seal payloads at rest: each with an id, one
// of them current for new jobs, and optionally one per tenant. Keys are
// never removed to rotate: a new key becomes current, jobs sealed under
// older ones stay readable, and Client.KeysRotate re-seals them on
// request. Deleting a tenant's key from the file makes that tenant's
// sealed jobs unreadable everywhere, backups included (crypto-shredding):
// a worker dead-letters them with a reason that names the key.
//
// A Keyring is read-only once loaded and safe for concurrent use.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
	macs    map[string][]byte // per key id: the HMAC key of unique-by-args keys, derived from the key
	tenants map[string]string
}

// String names the current key and counts the keys, never showing one,
// so that a Config printed or logged with %v or %+v leaks no key.
func (k *Keyring) String() string {
	return fmt.Sprintf("skiplock.Keyring{current: %s, keys: %d, tenant keys: %d}", k.current, len(k.aeads), len(k.tenants))
}

// GoString is String, for %#v.
func (k *Keyring) GoString() string { return k.String() }

// keyringFile is the keyring's JSON form, written with mode 0600.
type keyringFile struct {
	Version int               `json:"version"`
	Current string            `json:"current"`
	Keys    []keyringKey      `json:"keys"`
	Tenants map[string]string `json:"tenants,omitempty"`
}

type keyringKey struct {
	ID      string    `json:"id"`
	Key     string    `json:"key"` // base64, 32 bytes
	Created time.Time `json:"created"`
}

// ParseKeyring reads a keyring from its JSON form (what LoadKeyring reads
// from a file). Errors name the key id, never a key.
func ParseKeyring(data []byte) (*Keyring, error) {
	var f keyringFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("skiplock: keyring: not a keyring file: %w", err)
	}
	return newKeyring(f)
}

func newKeyring(f keyringFile) (*Keyring, error) {
	if f.Version != 1 {
		return nil, fmt.Errorf("skiplock: keyring: version %d, want 1", f.Version)
	}
	k := &Keyring{current: f.Current, aeads: map[string]cipher.AEAD{}, macs: map[string][]byte{}, tenants: map[string]string{}}
	for _, e := range f.Keys {
		if !keyIDRe.MatchString(e.ID) {
			return nil, fmt.Errorf("skiplock: keyring: key id %q must match %s", e.ID, keyIDRe)
		}
		if _, dup := k.aeads[e.ID]; dup {
			return nil, fmt.Errorf("skiplock: keyring: key id %q given twice", e.ID)
		}
		raw, err := base64.StdEncoding.DecodeString(e.Key)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("skiplock: keyring: key %q is not 32 bytes of base64", e.ID)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("skiplock: keyring: key %q: %w", e.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("skiplock: keyring: key %q: %w", e.ID, err)
		}
		k.aeads[e.ID] = aead
		mac := sha256.Sum256(append([]byte("skiplock unique-by-args v1\x00"), raw...))
		k.macs[e.ID] = mac[:]
	}
	if _, ok := k.aeads[f.Current]; !ok {
		return nil, fmt.Errorf("skiplock: keyring: current key %q is not in the keyring", f.Current)
	}
	// A tenant whose key was deleted keeps its entry: its jobs must not
	// fall back to the current key (they would be readable by everyone
	// holding it), so sealing for it fails, and so does opening.
	for t, id := range f.Tenants {
		k.tenants[t] = id
	}
	return k, nil
}

// LoadKeyring reads the keyring file at path (what `skiplock keys new`
// writes; SKIPLOCK_ENCRYPTION_KEYS and --encryption-keys name it). It
// refuses a file that other users may read or write.
func LoadKeyring(path string) (*Keyring, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("skiplock: keyring: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("skiplock: keyring: %s is readable or writable by other users (mode %04o); chmod 600 it",
			path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("skiplock: keyring: %w", err)
	}
	return ParseKeyring(data)
}

// KeyringAddKey adds a new random key to the keyring file at path,
// creating the file (mode 0600) if it does not exist, and returns its id.
// With tenant "", the key becomes the current one (new jobs are sealed
// with it; older keys stay, for the jobs sealed before); otherwise it
// becomes tenant's key. What `skiplock keys new --file F [--tenant T]` does.
func KeyringAddKey(path, tenant string) (string, error) {
	f := keyringFile{Version: 1}
	if _, err := os.Stat(path); err == nil {
		if _, err := LoadKeyring(path); err != nil { // its mode and content checked
			return "", err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("skiplock: keyring: %w", err)
		}
		if err := json.Unmarshal(data, &f); err != nil {
			return "", fmt.Errorf("skiplock: keyring: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("skiplock: keyring: %w", err)
	}
	if tenant != "" {
		if err := validateKey("tenant", tenant, MaxKeyBytes); err != nil {
			return "", err
		}
	}
	id, key := newKeyID(), make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	f.Keys = append(f.Keys, keyringKey{ID: id, Key: base64.StdEncoding.EncodeToString(key), Created: time.Now().UTC()})
	if tenant == "" {
		f.Current = id
	} else {
		if f.Tenants == nil {
			f.Tenants = map[string]string{}
		}
		f.Tenants[tenant] = id
		if f.Current == "" { // a new file: its first key serves the other tenants too
			f.Current = id
		}
	}
	if _, err := newKeyring(f); err != nil {
		return "", err
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return "", err
	}
	// Write beside it and rename, so a crash leaves the old file or the new.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("skiplock: keyring: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("skiplock: keyring: %w", err)
	}
	return id, nil
}

func newKeyID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "k" + time.Now().UTC().Format("20060102") + "-" + hex.EncodeToString(b)
}

// Current returns the id of the key new jobs without a tenant key are
// sealed with.
func (k *Keyring) Current() string { return k.current }

// KeyIDs returns the ids of the keys the keyring holds, sorted.
func (k *Keyring) KeyIDs() []string {
	ids := make([]string, 0, len(k.aeads))
	for id := range k.aeads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// keyFor returns the id of the key that seals tenant's jobs.
func (k *Keyring) keyFor(tenant string) string {
	if id, ok := k.tenants[tenant]; ok && tenant != "" {
		return id
	}
	return k.current
}

// argsKey is the unique key of a job unique by its arguments when payloads
// are sealed: the database cannot hash them (each envelope differs), so the
// client does, over the payload's canonical JSON (or only the fields
// named), with an HMAC keyed by tenant's key, so that the key reveals
// nothing of a guessable payload. A rotation of the current key starts new
// keys: a job enqueued before it and one after it do not collide.
func (k *Keyring) argsKey(kind string, payload []byte, fields []string, tenant string) (string, error) {
	id := k.keyFor(tenant)
	macKey, ok := k.macs[id]
	if !ok {
		return "", &keyMissingError{id: id, tenant: tenant}
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if len(fields) > 0 {
		obj, _ := v.(map[string]any)
		picked := map[string]any{}
		for _, f := range fields {
			if x, ok := obj[f]; ok {
				picked[f] = x
			}
		}
		v = picked
	}
	canonical, err := json.Marshal(v) // map keys sorted: one text per value
	if err != nil {
		return "", err
	}
	h := hmac.New(sha256.New, macKey)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(canonical)
	return "args:" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// seal returns the envelope of plain under tenant's key.
func (k *Keyring) seal(plain []byte, tenant string) ([]byte, error) {
	id, sealed, err := k.sealParts(plain, tenant)
	if err != nil {
		return nil, err
	}
	return joinEnvelope(id, sealed), nil
}

// sealParts seals plain under tenant's key: the key's id and the nonce,
// ciphertext and tag, as a job's row stores them (keyIDPayload and the
// sealed column, migration 24).
func (k *Keyring) sealParts(plain []byte, tenant string) (id string, sealed []byte, err error) {
	id = k.keyFor(tenant)
	aead, ok := k.aeads[id]
	if !ok {
		return "", nil, &keyMissingError{id: id, tenant: tenant}
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, err
	}
	return id, aead.Seal(nonce, nonce, plain, additionalData(id)), nil
}

// keyIDPayload is the payload of a job whose sealed payload is stored
// split: the envelope without its data.
func keyIDPayload(id string) string { return string(envelopePrefix) + "v1." + id + `"}` }

// joinEnvelope is the whole envelope of the bytes sealed with key id.
func joinEnvelope(id string, sealed []byte) []byte {
	out := make([]byte, 0, len(envelopePrefix)+len(id)+base64.RawURLEncoding.EncodedLen(len(sealed))+8)
	out = append(out, envelopePrefix...)
	out = append(out, "v1."...)
	out = append(out, id...)
	out = append(out, '.')
	out = base64.RawURLEncoding.AppendEncode(out, sealed)
	return append(out, `"}`...)
}

func additionalData(id string) []byte { return []byte("skiplock payload v1 " + id) }

// isEnvelope reports whether a stored payload is sealed.
func isEnvelope(raw []byte) bool {
	return bytes.HasPrefix(raw, envelopePrefix) || bytes.HasPrefix(raw, compactPrefix)
}

// openSealed opens an envelope with the client's keyring: raw whole, or,
// as a claim returns a job stored split (sealed not nil, migration 24),
// raw holding the key id and sealed the ciphertext's bytes. A client
// without a keyring cannot: the error names the key, so a worker not yet
// given the keyring fails the attempt instead of handing the envelope on as
// data.
func (c *Client) openSealed(raw, sealed []byte) ([]byte, error) {
	id, data, err := envelopeParts(raw, sealed)
	if err != nil {
		return nil, err
	}
	if c.cfg.Encryption == nil {
		return nil, fmt.Errorf("sealed with key %q, and this client has no keyring (Config.Encryption)", id)
	}
	return c.cfg.Encryption.openData(id, data)
}

// envelopeParts is parseEnvelope of a whole envelope (sealed nil) or of a
// split one: raw is then {"skiplock_encrypted": "v1.KEYID"}.
func envelopeParts(raw, sealed []byte) (id string, data []byte, err error) {
	if sealed == nil {
		return parseEnvelope(raw)
	}
	value, err := envelopeValue(raw)
	if err != nil {
		return "", nil, err
	}
	id, ok := strings.CutPrefix(value, "v1.")
	if !ok || !keyIDRe.MatchString(id) {
		return "", nil, errors.New("payload: not a skiplock envelope (want v1.KEYID beside its sealed bytes)")
	}
	return id, sealed, nil
}

// wholePayload is the payload of prepared args as one JSON document: a
// sealed one's whole envelope (what a workflow task stores).
func wholePayload(a store.EnqueueArgs) (string, error) {
	if a.Sealed == nil {
		return a.Payload, nil
	}
	id, _, err := envelopeParts([]byte(a.Payload), a.Sealed)
	if err != nil {
		return "", err
	}
	return string(joinEnvelope(id, a.Sealed)), nil
}

// openIfSealed is what a person asking to see stored data gets (JobPayload,
// a task's output): the plaintext when the client's keyring opens it, the
// data as stored (an envelope shows only its key id) otherwise.
func (c *Client) openIfSealed(raw []byte) []byte {
	if k := c.cfg.Encryption; k != nil && isEnvelope(raw) {
		if plain, err := k.open(raw); err == nil {
			return plain
		}
	}
	return raw
}

// sealRunData seals data the handler of ctx stores beside its job (a
// workflow task's output, a step's result; field names it in errors) under
// the key of the job's tenant, when its client has a keyring; otherwise it
// returns raw as it is.
func sealRunData(ctx context.Context, field string, raw []byte) ([]byte, error) {
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil || run.client.cfg.Encryption == nil {
		return raw, nil
	}
	sealed, err := run.client.cfg.Encryption.seal(raw, run.tenant)
	if err != nil {
		return nil, invalidJob(field, "%v", err)
	}
	return sealed, nil
}

// openRunData opens sealed data the handler of ctx reads (a task's output,
// a step's recorded result, a signal's payload; what names it in errors)
// with its client's keyring; data not sealed is returned as it is (sealed
// and plain data coexist during a rollout).
func openRunData(ctx context.Context, what string, raw []byte) ([]byte, error) {
	if !isEnvelope(raw) {
		return raw, nil
	}
	run, _ := ctx.Value(runKey{}).(*jobRun)
	if run == nil {
		return nil, ErrNotInHandler
	}
	plain, err := run.client.openSealed(raw, nil)
	if err != nil {
		return nil, fmt.Errorf("skiplock: %s: %w", what, err)
	}
	return plain, nil
}

// parseEnvelope is a whole envelope's key id and nonce, ciphertext and tag.
func parseEnvelope(raw []byte) (id string, sealed []byte, err error) {
	value, err := envelopeValue(raw)
	if err != nil {
		return "", nil, err
	}
	parts := strings.SplitN(value, ".", 3)
	if len(parts) != 3 || parts[0] != "v1" || !keyIDRe.MatchString(parts[1]) {
		return "", nil, errors.New("payload: not a skiplock envelope (want v1.KEYID.DATA)")
	}
	sealed, err = base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", nil, errors.New("payload: envelope data is not base64url")
	}
	return parts[1], sealed, nil
}

// envelopeValue is the value of an envelope's one member: as jsonb prints
// it (how a worker reads it), the text between the prefix and `"}`, with
// nothing JSON would escape; otherwise decoded.
func envelopeValue(raw []byte) (string, error) {
	if v, ok := bytes.CutPrefix(raw, envelopePrefix); ok && bytes.HasSuffix(v, []byte(`"}`)) &&
		bytes.IndexByte(v[:len(v)-2], '"') < 0 && bytes.IndexByte(v[:len(v)-2], '\\') < 0 {
		return string(v[:len(v)-2]), nil
	}
	var e map[string]string
	if err := json.Unmarshal(raw, &e); err != nil || len(e) != 1 {
		return "", errors.New("payload: not a skiplock envelope")
	}
	return e[encryptedField], nil
}

// open returns the plaintext of an envelope.
func (k *Keyring) open(raw []byte) ([]byte, error) {
	id, sealed, err := parseEnvelope(raw)
	if err != nil {
		return nil, err
	}
	return k.openData(id, sealed)
}

// openData returns the plaintext of the nonce, ciphertext and tag sealed
// with key id.
func (k *Keyring) openData(id string, sealed []byte) ([]byte, error) {
	aead, ok := k.aeads[id]
	if !ok {
		return nil, &keyMissingError{id: id}
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("payload: sealed with key %q, too short to open", id)
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], additionalData(id))
	if err != nil {
		return nil, fmt.Errorf("payload: sealed with key %q, does not open with it (altered, or another key of that id)", id)
	}
	return plain, nil
}

// keyMissingError: the key an envelope names, or a tenant's key, is not
// in the keyring (deleted: the jobs sealed with it are shredded).
type keyMissingError struct{ id, tenant string }

func (e *keyMissingError) Error() string {
	if e.tenant != "" {
		return fmt.Sprintf("payload: tenant's key %q is not in the keyring (deleted: the tenant's jobs cannot be sealed)", e.id)
	}
	return fmt.Sprintf("payload: sealed with key %q, which the keyring does not hold "+
		"(deleted: the job is unreadable, crypto-shredded)", e.id)
}

// KeysRotate re-seals the payload of every ready job (due or scheduled)
// and every dead letter sealed under a key other than the one the client's
// keyring now gives its tenant (the tenant's key, else the current key), in
// batches of 500, each its own transaction, and returns how many it
// re-sealed. Running jobs keep their envelope, opened by their worker with
// the older key; keep that key in the keyring until nothing needs it.
// Plain payloads stay plain; the finished-job history is left as it is.
// What `skiplock keys rotate` does.
func (c *Client) KeysRotate(ctx context.Context) (int64, error) {
	k := c.cfg.Encryption
	if k == nil {
		return 0, invalidConfig("Encryption", "KeysRotate needs a keyring")
	}
	var n int64
	for _, dead := range []bool{false, true} {
		m, err := c.reseal(ctx, k, dead)
		n += m
		if err != nil {
			return n, fmt.Errorf("skiplock: keys rotate: %w", err)
		}
	}
	return n, nil
}

// reseal is KeysRotate over the ready jobs or the dead letters.
func (c *Client) reseal(ctx context.Context, k *Keyring, dead bool) (int64, error) {
	var n, after int64
	for {
		var batch []store.SealedRow
		var m int64
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			if batch, err = c.store.SealedReadyBatch(ctx, tx, dead, after, 500); err != nil {
				return err
			}
			for _, r := range batch {
				id, data, err := envelopeParts([]byte(r.Payload), r.Sealed)
				if err != nil || id == k.keyFor(r.Tenant) {
					continue // not ours to read, or sealed as it should be
				}
				plain, err := k.openData(id, data)
				if err != nil {
					return fmt.Errorf("job %d: %w", r.ID, err)
				}
				id, data, err = k.sealParts(plain, r.Tenant)
				if err != nil {
					return fmt.Errorf("job %d: %w", r.ID, err)
				}
				if err := c.store.ResealPayload(ctx, tx, dead, r.ID, keyIDPayload(id), data); err != nil {
					return err
				}
				m++
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n += m
		if len(batch) == 0 {
			return n, nil
		}
		after = batch[len(batch)-1].ID
	}
}
