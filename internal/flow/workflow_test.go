package flow

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Order checks the task graph and puts every task after its parents,
// keeping the given order where it can; each refusal names the field.
func TestOrder(t *testing.T) {
	spec := func(name string, deps ...string) TaskSpec { return TaskSpec{Name: name, DependsOn: deps} }
	names := func(specs []TaskSpec) []string {
		var out []string
		for _, s := range specs {
			out = append(out, s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		specs []TaskSpec
		known bool
		want  []string
		field string // the refusal's field, or "" for none
		msg   string
	}{
		{name: "kept order", specs: []TaskSpec{spec("a"), spec("b", "a"), spec("c")}, want: []string{"a", "b", "c"}},
		{name: "parents first", specs: []TaskSpec{spec("d", "b", "c"), spec("b", "a"), spec("c", "a"), spec("a")},
			want: []string{"a", "b", "c", "d"}},
		{name: "unknown parent", specs: []TaskSpec{spec("a"), spec("b", "x")},
			field: "tasks[1].depends_on", msg: `"x" names no task of the workflow`},
		{name: "unknown parent at run time", specs: []TaskSpec{spec("b", "x"), spec("a", "b")}, known: true,
			want: []string{"b", "a"}},
		{name: "itself", specs: []TaskSpec{spec("a", "a")}, known: true,
			field: "tasks[0].depends_on", msg: "a task cannot depend on itself"},
		{name: "cycle", specs: []TaskSpec{spec("a", "c"), spec("b", "a"), spec("c", "b")},
			field: "tasks[0].depends_on", msg: `the tasks form a cycle through "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Order(tc.specs, tc.known)
			if tc.field == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, names(got))
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, FieldError{Field: tc.field, Message: tc.msg}, *fe)
		})
	}
}
