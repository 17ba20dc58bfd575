package skiplock

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
)

// MaxMetadataBytes bounds a job's metadata, encoded as JSON (64 KiB; the SQL
// function skiplock.validate_metadata applies the same bound).
const MaxMetadataBytes = 64 << 10

// Metadata is a job's metadata: a small JSON object set at enqueue that
// travels with the job to its handler (Job.Metadata), the dead-letter table,
// the archive, the dashboard's job page and job lookups. It is meant for
// trace context (W3C traceparent and tracestate), request ids and tags; the
// handler's arguments belong in the payload. Unlike a payload, metadata is
// shown by the dashboard: keep secrets and personal data out of it.
//
// Metadata has the method set of OpenTelemetry's propagation.TextMapCarrier
// (Get, Set, Keys), so a propagator can inject a trace context into it at
// enqueue and extract it in the handler without skiplock importing
// OpenTelemetry (see contrib/otelskiplock).
type Metadata map[string]any

// W3C Trace Context keys, as propagators write them into Metadata.
const (
	MetadataTraceParent = "traceparent"
	MetadataTraceState  = "tracestate"
)

// Get returns the value of key if it is a string, else "".
func (m Metadata) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

// Set stores a string value. m must not be nil: a middleware that adds keys
// to a job's metadata should start from Clone, which never returns nil, so
// that a map the caller shares between jobs is never written to.
func (m Metadata) Set(key, value string) { m[key] = value }

// Keys returns the keys, sorted.
func (m Metadata) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Clone returns a shallow copy of m (an empty, non-nil map when m is nil).
func (m Metadata) Clone() Metadata {
	out := make(Metadata, len(m)+2)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ParseMetadata decodes raw JSON into Metadata with the checks Enqueue
// applies: a JSON object of at most MaxMetadataBytes, valid UTF-8, no NUL
// character. Numbers keep their exact text (json.Number). Errors are
// FieldErrors for the field "metadata" and never echo the content.
func ParseMetadata(raw []byte) (Metadata, error) {
	if err := validateMetadata(raw); err != nil {
		return nil, err
	}
	m, err := decodeMetadata(raw)
	if err != nil {
		return nil, invalidJob("metadata", "not valid JSON")
	}
	return m, nil
}

// validateMetadata applies the payload's JSON rules to metadata, with its
// own bound and field name.
func validateMetadata(raw []byte) error {
	if err := ValidatePayload(raw, MaxMetadataBytes); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return invalidJob("metadata", "%s", fe.Message)
		}
		return err
	}
	return nil
}

// encodeMetadata turns Metadata into the text the enqueue statement takes:
// nil (SQL NULL) for no metadata, so jobs without it store nothing.
func encodeMetadata(m Metadata) (*string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		// The marshal error names a Go type, not a value.
		return nil, invalidJob("metadata", "cannot be marshalled to JSON: %v", err)
	}
	if err := validateMetadata(raw); err != nil {
		return nil, err
	}
	s := string(raw)
	return &s, nil
}

// decodeMetadata decodes stored metadata; nil for none.
func decodeMetadata(raw []byte) (Metadata, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m Metadata
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// metadata returns the job's decoded metadata, decoding it once per run so
// work middleware and the handler share one map. The database only stores
// JSON objects here, so a decode error cannot happen short of corruption; it
// yields no metadata rather than failing the job.
func (r *jobRun) metadata(raw []byte) Metadata {
	if r.meta == nil && len(raw) > 0 {
		r.meta, _ = decodeMetadata(raw)
	}
	return r.meta
}
