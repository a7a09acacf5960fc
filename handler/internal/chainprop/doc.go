// Package chainprop holds the property test of handler.New's assembled
// chain against a reference model, on memstore, on Redis and on sqlstore's
// transactional inbox over SQLite. It has no code of its own: everything
// lives in its _test.go file.
//
// The test is apart from package handler so that handler's own tests do
// not import the SQLite driver: "go mod tidy" in a module that imports
// handler loads handler's tests and their imports, and would record
// modernc.org/sqlite in that module's go.sum (see internal/tidycheck).
package chainprop
