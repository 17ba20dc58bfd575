package importer

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// asynqTask is the part of asynq's TaskMessage (internal/proto/asynq.proto
// in github.com/hibiken/asynq, stored protobuf-encoded in the "msg" field of
// the task's hash) that the import carries.
type asynqTask struct {
	Type         string
	Payload      []byte
	Headers      map[string]string
	ID           string
	Queue        string
	Retry        int32 // max retries
	Retried      int32
	ErrorMsg     string
	LastFailedAt int64 // unix seconds
	Timeout      int64 // seconds
	Deadline     int64 // unix seconds
	UniqueKey    string
	GroupKey     string
}

// decodeTask reads a TaskMessage with the protobuf wire format's own
// reader: asynq's generated types are internal to its module, and the
// message is small and stable (fields numbered as in asynq.proto; unknown
// fields are skipped, as any protobuf reader does).
func decodeTask(b []byte) (asynqTask, error) {
	var t asynqTask
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return t, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == 1 || num == 2 || num == 3 || num == 4 || num == 7 || num == 10 || num == 14 || num == 15):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return t, protowire.ParseError(n)
			}
			b = b[n:]
			switch num {
			case 1:
				t.Type = string(v)
			case 2:
				t.Payload = append([]byte(nil), v...)
			case 3:
				t.ID = string(v)
			case 4:
				t.Queue = string(v)
			case 7:
				t.ErrorMsg = string(v)
			case 10:
				t.UniqueKey = string(v)
			case 14:
				t.GroupKey = string(v)
			case 15:
				k, val, err := decodeMapEntry(v)
				if err != nil {
					return t, err
				}
				if t.Headers == nil {
					t.Headers = map[string]string{}
				}
				t.Headers[k] = val
			}
		case typ == protowire.VarintType && (num == 5 || num == 6 || num == 8 || num == 9 || num == 11):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return t, protowire.ParseError(n)
			}
			b = b[n:]
			switch num {
			case 5:
				t.Retry = int32(v)
			case 6:
				t.Retried = int32(v)
			case 8:
				t.Timeout = int64(v)
			case 9:
				t.Deadline = int64(v)
			case 11:
				t.LastFailedAt = int64(v)
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return t, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	if t.ID == "" || t.Type == "" {
		return t, errors.New("asynq task message without an id or a type")
	}
	return t, nil
}

// decodeMapEntry reads one map<string, string> entry: key 1, value 2.
func decodeMapEntry(b []byte) (string, string, error) {
	var k, v string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", "", protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		s, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case 1:
			k = string(s)
		case 2:
			v = string(s)
		default:
			return "", "", fmt.Errorf("asynq header entry: unexpected field %d", num)
		}
	}
	return k, v, nil
}
