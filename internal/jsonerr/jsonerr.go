// Package jsonerr describes encoding/json's decoding errors without quoting
// the document: payloads, task outputs, step results and signal payloads
// are the application's data, and an error text may be stored as a job's
// error and logged. The root package (a payload that does not decode) and
// the workflow engine (internal/flow: checkpoints, outputs) both use it.
package jsonerr

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Text describes a decoding error of encoding/json without quoting the
// document: its own messages can (a syntax error names the offending
// character, a type error the number it could not store), so those two are
// described by position and type only. Other errors keep their text.
func Text(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return "invalid JSON at byte offset " + strconv.FormatInt(se.Offset, 10)
	case errors.As(err, &te):
		what, _, _ := strings.Cut(te.Value, " ") // "number 1.5" names the number
		msg := "cannot store a JSON " + what + " in Go type " + te.Type.String()
		if te.Field != "" {
			msg += " (field " + te.Field + ")"
		}
		return msg + " at byte offset " + strconv.FormatInt(te.Offset, 10)
	}
	return err.Error()
}
