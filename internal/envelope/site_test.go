package envelope_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/middleware"
)

// Frame and StackTrace have the shape of github.com/pkg/errors' types:
// a StackTrace() method returning a slice of uintptr program counters.
type (
	Frame      uintptr
	StackTrace []Frame
)

// pkgError carries a stack the way github.com/pkg/errors does.
type pkgError struct {
	msg   string
	err   error
	stack []uintptr
}

func (e *pkgError) Error() string { return e.msg }
func (e *pkgError) Unwrap() error { return e.err }

func (e *pkgError) StackTrace() StackTrace {
	st := make(StackTrace, len(e.stack))
	for i, pc := range e.stack {
		st[i] = Frame(pc)
	}
	return st
}

// callersError carries a stack the way github.com/go-errors/errors does.
type callersError struct{ stack []uintptr }

func (e *callersError) Error() string      { return "callers error" }
func (e *callersError) Callers() []uintptr { return e.stack }

// callers returns the program counters of its caller's caller and up.
func callers() []uintptr {
	pcs := make([]uintptr, 32)
	return pcs[:runtime.Callers(3, pcs)]
}

func newPkgError(msg string, wrapped error) error {
	return &pkgError{msg: msg, err: wrapped, stack: callers()}
}

func newCallersError() error { return &callersError{stack: callers()} }

// line is the line it is called from.
func line() int {
	_, _, n, _ := runtime.Caller(1)
	return n
}

// site is the call site of function fn of this file at line n.
func site(fn string, n int) string {
	return fmt.Sprintf("envelope_test.%s (site_test.go:%d)", fn, n)
}

// chargeCard and the functions below return the line they create an
// error with a stack on, and the error.
func chargeCard() (int, error) { return line(), newPkgError("card declined", nil) }

func reserveStock() (int, error) { return line(), newCallersError() }

func handle(err error) (int, error) { return line(), newPkgError("handle", err) }

type gateway struct{}

func (gateway) Charge() (int, error) { return line(), newPkgError("declined", nil) }

// hostile has a StackTrace method that panics and an Unwrap that does.
type hostile struct{ unwrap bool }

func (h hostile) Error() string { return "hostile" }

func (h hostile) StackTrace() StackTrace { panic("hostile StackTrace") }

func (h hostile) Unwrap() error {
	if h.unwrap {
		panic("hostile Unwrap")
	}
	return nil
}

// An error that carries a stack gives the top frame of the innermost one
// of its chain; a plain error gives none.
func TestErrorSiteFromChain(t *testing.T) {
	t.Parallel()
	chargeLine, charge := chargeCard()
	reserveLine, reserve := reserveStock()
	wrappedLine, wrapped := handle(fmt.Errorf("charge: %w", charge))
	methodLine, method := gateway{}.Charge()
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"pkg/errors shape", charge, site("chargeCard", chargeLine)},
		{"Callers", reserve, site("reserveStock", reserveLine)},
		{"method", method, site("gateway.Charge", methodLine)},
		{"wrapped by %w", fmt.Errorf("pay: %w", charge), site("chargeCard", chargeLine)},
		{"innermost of two", wrapped, site("chargeCard", chargeLine)},
		{"outer when the inner has none", func() error { _, e := handle(errors.New("plain")); return e }(), site("handle", wrappedLine)},
		{"join", errors.Join(errors.New("plain"), fmt.Errorf("b: %w", reserve)), site("reserveStock", reserveLine)},
		{"deeper branch of a join", errors.Join(reserve, fmt.Errorf("b: %w", fmt.Errorf("c: %w", charge))), site("chargeCard", chargeLine)},
		{"plain", errors.New("card declined"), ""},
		{"plain wrapped", fmt.Errorf("a: %w", errors.Join(errors.New("b"), errors.New("c"))), ""},
		{"nil", nil, ""},
		{"hostile StackTrace", hostile{}, ""},
		{"hostile Unwrap", hostile{unwrap: true}, ""},
		{"typed nil", (*pkgError)(nil), ""},
	}
	for _, c := range cases {
		require.Equal(t, c.want, envelope.ErrorSite(c.err, nil), c.name)
	}
}

// A chain deeper than the walk's bound is read to the bound, and a hostile
// error beside a stack does not hide it.
func TestErrorSiteBoundedChain(t *testing.T) {
	t.Parallel()
	chargeLine, charge := chargeCard()
	deep := charge
	for range 100 {
		deep = fmt.Errorf("w: %w", deep)
	}
	require.Empty(t, envelope.ErrorSite(deep, nil), "the stack is past the bound")
	require.Equal(t, site("chargeCard", chargeLine), envelope.ErrorSite(errors.Join(hostile{}, charge), nil))
}

// stackOf is a stack as runtime/debug.Stack prints it, in a panic recovered
// by surely's middleware, with frames of the given functions (and files)
// where the panic happened.
func stackOf(frames ...string) string {
	var b strings.Builder
	b.WriteString("goroutine 42 [running]:\n" +
		"runtime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x5e\n" +
		"github.com/surely-dev/surely/middleware.recovered(...)\n\t/home/u/go/pkg/mod/github.com/surely-dev/surely@v1.0.0/middleware/errors.go:96\n" +
		"github.com/surely-dev/surely/middleware.runHandler.func1()\n\t/home/u/go/pkg/mod/github.com/surely-dev/surely@v1.0.0/middleware/dedup.go:823 +0x45\n" +
		"panic({0x9a3b40?, 0xc0001a2f30?})\n\t/usr/local/go/src/runtime/panic.go:792 +0x132\n")
	for _, f := range frames {
		b.WriteString(f + "\n")
	}
	b.WriteString("github.com/surely-dev/surely/middleware.runHandler(...)\n\t/home/u/go/pkg/mod/github.com/surely-dev/surely@v1.0.0/middleware/dedup.go:828\n" +
		"github.com/ThreeDotsLabs/watermill/message.(*Router).Run.func1()\n\t/home/u/go/pkg/mod/github.com/!three!dots!labs/watermill@v1.5.3/message/router.go:400 +0x2a\n" +
		"created by github.com/ThreeDotsLabs/watermill/message.(*Router).Run in goroutine 1\n\t/home/u/go/pkg/mod/github.com/!three!dots!labs/watermill@v1.5.3/message/router.go:390 +0x1c\n")
	return b.String()
}

// cut returns s up to the first sep.
func cut(s, sep string) string {
	before, _, _ := strings.Cut(s, sep)
	return before
}

// The site of a panic is its first frame outside the runtime, Watermill
// and surely, read from a stack as runtime/debug.Stack prints it.
func TestErrorSiteFromPanicStack(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	cases := []struct {
		name  string
		stack string
		want  string
	}{
		{"method", stackOf(
			"github.com/acme/shop/payments.(*Gateway).Charge(0xc000123450, {0xc0001b2000, 0x10})\n\t/src/shop/payments/gateway.go:42 +0x1d",
			"github.com/acme/shop/orders.handle(0xc000200000)\n\t/src/shop/orders/handle.go:17 +0x88"),
			"payments.(*Gateway).Charge (gateway.go:42)"},
		{"nil dereference", stackOf(
			"runtime.panicmem(...)\n\t/usr/local/go/src/runtime/panic.go:262",
			"runtime.sigpanic()\n\t/usr/local/go/src/runtime/signal_unix.go:925 +0x359",
			"main.handle(0x0)\n\t/src/app/main.go:9 +0x12"),
			"main.handle (main.go:9)"},
		{"generic, inlined", stackOf("github.com/acme/shop/store.Get[...](...)\n\t/src/shop/store/store.go:9"),
			"store.Get[...] (store.go:9)"},
		{"closure", stackOf("gopkg.in/acme.v3/pay.Run.func2.1()\n\tC:/src/pay/run.go:77 +0x4"), "pay.Run.func2.1 (run.go:77)"},
		{"windows path", stackOf("main.f()\n\tC:\\src\\app\\main.go:5 +0x4"), "main.f (main.go:5)"},
		{"surely's examples count", stackOf("github.com/surely-dev/surely/examples/inventory.reserve(...)\n\t/src/surely/examples/inventory/main.go:30"),
			"inventory.reserve (main.go:30)"},
		{"surely's tests count", stackOf("github.com/surely-dev/surely/dlq_test.TestX.func1(...)\n\t/src/surely/dlq/dlq_test.go:10"),
			"dlq_test.TestX.func1 (dlq_test.go:10)"},
		{"a look-alike module counts", stackOf("github.com/surely-dev/surelyx/pay.Charge()\n\t/src/pay/pay.go:3 +0x4"),
			"pay.Charge (pay.go:3)"},
		{"surely's own code does not", stackOf("github.com/surely-dev/surely/handler.New.func1()\n\t/src/surely/handler/handler.go:3 +0x4",
			"github.com/acme/app.handle()\n\t/src/app/app.go:8 +0x4"), "app.handle (app.go:8)"},
		{"creator when nothing else", stackOf() + "created by github.com/acme/shop/worker.Start in goroutine 1\n\t/src/shop/worker/start.go:12 +0x5c\n",
			"worker.Start (start.go:12)"},
		{"only internal frames", stackOf(), ""},
		{"cut short", cut(stackOf("main.handle()\n\t/src/app/main.go:9 +0x12"), ":9 +0x12"), ""},
		{"cut shorter", cut(stackOf("main.handle()\n\t/src/app/main.go:9 +0x12"), " +0x12"), "main.handle (main.go:9)"},
		{"not a stack", "card declined", ""},
		{"no line number", stackOf("main.handle()\n\t/src/app/main.go +0x12"), ""},
		{"bounded", stackOf("main." + long + "()\n\t/src/" + long + ".go:9 +0x12"), ""},
		{"unprintable", stackOf("main.h\x1b[31m\xff()\n\t/src/a\rb.go:9 +0x12"), "main.h?[31m? (a?b.go:9)"},
	}
	for _, c := range cases {
		got := envelope.ErrorSite(&middleware.PanicError{Value: "boom", Stack: c.stack}, nil)
		require.True(t, utf8.ValidString(got), c.name)
		require.LessOrEqual(t, len(got), 256, c.name)
		if c.name == "bounded" {
			require.True(t, strings.HasPrefix(got, "main.xxx"), "%s: %q", c.name, got)
			require.True(t, strings.HasSuffix(got, "x:9)"), "%s: %q", c.name, got)
			continue
		}
		require.Equal(t, c.want, got, c.name)
		// The same stack as the history's last attempt has it.
		h := []idempotency.AttemptRecord{{Attempt: 1, Stack: stackOf("main.earlier()\n\t/src/app/main.go:1 +0x1")}, {Attempt: 2, Stack: c.stack}}
		require.Equal(t, c.want, envelope.ErrorSite(errors.New("surely: attempt budget exhausted"), h), "%s, from the history", c.name)
	}
}

// A panic's site comes before a stack of the chain, and the chain's
// before the history's; a history whose last attempt did not panic gives
// none.
func TestErrorSitePrecedence(t *testing.T) {
	t.Parallel()
	chargeLine, charge := chargeCard()
	panicked := &middleware.PanicError{Value: charge, Stack: stackOf("main.handle()\n\t/src/app/main.go:9 +0x12")}
	history := []idempotency.AttemptRecord{{Attempt: 1, Stack: stackOf("main.old()\n\t/src/app/main.go:3 +0x12")}}

	require.Equal(t, "main.handle (main.go:9)", envelope.ErrorSite(fmt.Errorf("final: %w", panicked), history), "the panic")
	require.Equal(t, "main.handle (main.go:9)", envelope.ErrorSite(errors.Join(charge, panicked), history), "the panic in a join")
	require.Equal(t, site("chargeCard", chargeLine), envelope.ErrorSite(&middleware.PanicError{Value: charge, Stack: stackOf()}, nil),
		"a panic without a user frame: its value's stack")
	require.Equal(t, site("chargeCard", chargeLine), envelope.ErrorSite(charge, history), "the chain before the history")
	require.Equal(t, "main.old (main.go:3)", envelope.ErrorSite(errors.New("exhausted"), history), "the history")
	history = append(history, idempotency.AttemptRecord{Attempt: 2, Error: "later"})
	require.Empty(t, envelope.ErrorSite(errors.New("exhausted"), history), "the last attempt did not panic")
}
