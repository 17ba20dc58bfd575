// Package river tests `skiplock import river` against the real thing: a
// River schema made by River's own migrator and jobs put in each state by
// River's own client. It is a module of its own so that River's
// requirements (newer golang.org/x/sync and x/text than skiplock's) stay out
// of skiplock's go.mod; it builds against this checkout through a replace.
//
// Run it with: cd test/river && go test ./...
package river
