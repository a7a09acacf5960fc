package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
)

// A ddlRecorder is a database/sql connector whose connections execute
// nothing: they record every statement given to Exec and the BEGIN and
// COMMIT of every transaction, and answer every query with an error. A package's Migrate run on
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
func (c recConn) Begin() (driver.Tx, error) {
	c.r.add(recordedStmt{SQL: "BEGIN"})
	return recTx(c), nil
}

func (c recConn) ExecContext(_ context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	st := recordedStmt{SQL: query}
	for _, a := range args {
		st.Args = append(st.Args, a.Value)
	}
	c.r.add(st)
	return driver.RowsAffected(0), nil
}

func (r *ddlRecorder) add(st recordedStmt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, st)
}

func (recConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, errRecorder
}

// recTx records the end of a transaction: COMMIT (a Rollback after it,
// as a deferred one, is not recorded).
type recTx struct{ r *ddlRecorder }

func (t recTx) Commit() error {
	t.r.add(recordedStmt{SQL: "COMMIT"})
	return nil
}

func (recTx) Rollback() error { return nil }
