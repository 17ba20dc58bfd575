package skiplock

import (
	"fmt"
	"reflect"
)

// JobArgs is an args type that names its job kind, so that the producer
// (Enqueue with the value as Payload) and the handler (HandleArgs) share
// the kind at compile time instead of typing the same string twice:
//
//	type WelcomeArgs struct{ UserID int64 `json:"user_id"` }
//	func (WelcomeArgs) Kind() string { return "welcome" }
//
// Kind must return the same constant for every value, the zero value
// included (HandleArgs calls it on one); use a value receiver. Plain string
// kinds (EnqueueParams.Kind, Handle) keep working beside it.
type JobArgs interface {
	Kind() string
}

// HandleArgs registers fn for the kind T names (T's Kind method) on c, like
// Handle with that kind; fn receives the payload decoded into T. Call it
// before Start.
func HandleArgs[T JobArgs](c *Client, fn HandlerFunc[T], opts ...HandlerOption) error {
	kind, err := kindOf[T]()
	if err != nil {
		return err
	}
	return Handle(c, kind, fn, opts...)
}

// kindOf returns the kind of T's zero value, or an error naming the type
// when its Kind method cannot run on it (a pointer receiver on a nil
// pointer).
func kindOf[T JobArgs]() (kind string, err error) {
	var zero T
	defer func() {
		if recover() != nil {
			err = invalidJob("kind", "%s.Kind() panicked on the zero value; give it a value receiver that returns a constant",
				reflect.TypeFor[T]())
		}
	}()
	return zero.Kind(), nil
}

// kindOfPayload resolves the kind of an enqueue: EnqueueParams.Kind, or
// the Kind() of a payload that implements JobArgs. When both are set they
// must agree, so a producer cannot send one type under another's kind.
func kindOfPayload(kind string, payload any) (string, error) {
	args, ok := payload.(JobArgs)
	if !ok {
		return kind, nil
	}
	named, err := safeKind(args)
	if err != nil {
		return "", err
	}
	switch {
	case kind == "":
		return named, nil
	case kind != named:
		return "", invalidJob("kind", "%q differs from %q, the Kind() of the payload's type %T", kind, named, payload)
	}
	return kind, nil
}

func safeKind(a JobArgs) (kind string, err error) {
	defer func() {
		if recover() != nil {
			err = invalidJob("kind", "the payload's Kind() method panicked (%s)", fmt.Sprintf("%T", a))
		}
	}()
	return a.Kind(), nil
}
