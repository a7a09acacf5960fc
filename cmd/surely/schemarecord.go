package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
)

// A ddlRecorder is a database/sql connector whose connections execute
// nothing: they record every statement given to Exec, answer every query
// with an error, and commit every transaction. A package's Migrate run on
// it records the statements it runs on an empty database (every probe of
// a table or column fails, so nothing is skipped): migrate up --print
// shows them, and migrate status checks each on the real database. The
// statements are the packages' own; the command holds no copy of their
// SQL.
type ddlRecorder struct {
	mu    sync.Mutex
	stmts []recordedStmt
}

// recordedStmt is one statement Migrate executed, with its arguments.
type recordedStmt struct {
	SQL  string
	Args []any
}

// errRecorder answers every query of a recording connection.
var errRecorder = errors.New("surely: recording connection: no table, no column")

// record returns the statements migrate runs on an empty database.
func record(migrate func(db *sql.DB) error) ([]recordedStmt, error) {
	r := &ddlRecorder{}
	db := sql.OpenDB(r)
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	if err := migrate(db); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stmts, nil
}

func (r *ddlRecorder) Connect(context.Context) (driver.Conn, error) { return recConn{r}, nil }
func (r *ddlRecorder) Driver() driver.Driver                        { return recDriver{r} }

type recDriver struct{ r *ddlRecorder }

func (d recDriver) Open(string) (driver.Conn, error) { return recConn(d), nil }

type recConn struct{ r *ddlRecorder }

func (recConn) Prepare(string) (driver.Stmt, error) { return nil, errRecorder }
func (recConn) Close() error                        { return nil }
func (recConn) Begin() (driver.Tx, error)           { return recTx{}, nil }

func (c recConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st := recordedStmt{SQL: query}
	for _, a := range args {
		st.Args = append(st.Args, a.Value)
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.stmts = append(c.r.stmts, st)
	return driver.RowsAffected(0), nil
}

func (recConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, errRecorder
}

type recTx struct{}

func (recTx) Commit() error   { return nil }
func (recTx) Rollback() error { return nil }
