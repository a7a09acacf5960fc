package envelope

import (
	"cmp"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/surely-dev/surely/idempotency"
)

// Bounds of ErrorSite: its length in bytes, the error chain it walks
// (depth, and errors visited in all), and the frames it reads of one
// stack.
const (
	maxSiteLen     = 256
	maxSiteFunc    = 160
	maxSiteFile    = 80
	maxChainDepth  = 32
	maxChainVisits = 64
	maxFrames      = 64
)

// Code that is never the call site of a user's failure: the runtime,
// Watermill (the router and its adapters), and surely itself but for its
// examples.
const (
	surelyPath    = "github.com/surely-dev/surely"
	examplesPath  = surelyPath + "/examples/"
	watermillPath = "github.com/ThreeDotsLabs/watermill"
)

// panicStacker is an error that carries the stack of a recovered panic,
// as runtime/debug.Stack prints it: *middleware.PanicError (which imports
// this package, so ErrorSite cannot name its type).
type panicStacker interface{ PanicStack() string }

// panicStack is the stack of the first panicStacker in err's chain, ""
// when there is none.
func panicStack(err error) string {
	var ps panicStacker
	if errors.As(err, &ps) {
		return ps.PanicStack()
	}
	return ""
}

// ErrorSite is the call site of a final failure, written to KeyErrorSite:
// "function (file.go:line)", the function qualified by the last element
// of its package path ("payments.(*Gateway).Charge (gateway.go:42)"), at
// most 256 bytes. It is the first frame of a stack that is not in the
// runtime, in Watermill or in surely (but for surely's examples, and for
// its _test.go files, so that its tests can see their own frames), taken
// from, in this order:
//
//  1. the stack of the panic in err's chain (the first error with a
//     PanicStack() string method, a *middleware.PanicError): panics
//     always have one;
//  2. the innermost error of err's chain that carries a stack: one with a
//     StackTrace method returning a slice of uintptr-kinded program
//     counters (github.com/pkg/errors and its kin), or a
//     Callers() []uintptr method (github.com/go-errors/errors and
//     others);
//  3. the stack of history's last attempt, which has one when it panicked
//     (a budget exhausted by a panic is known only from the history).
//
// Otherwise it is "": a Go error carries no stack unless a library adds
// one, so the site of a plain error is not known. An error whose methods
// panic is contained: it gives no site.
func ErrorSite(err error, history []idempotency.AttemptRecord) string {
	if err != nil {
		if s := contain(func() string { return stackSite(panicStack(err)) }); s != "" {
			return s
		}
	}
	if s := contain(func() string { return chainSite(err) }); s != "" {
		return s
	}
	if n := len(history); n > 0 && history[n-1].Stack != "" {
		return contain(func() string { return stackSite(history[n-1].Stack) })
	}
	return ""
}

// contain returns f(), or "" when f panics.
func contain(f func() string) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	return f()
}

// chainSite returns the site of the innermost error of err's chain that
// carries a stack (the next outer one when a stack has no frame outside
// surely and its dependencies), or "". The chain is walked depth first,
// the branches of a join in order; an error deeper in it is more inner.
func chainSite(err error) string {
	type carrier struct {
		depth int
		pcs   []uintptr
	}
	var carriers []carrier
	visits := 0
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		for e != nil && depth < maxChainDepth && visits < maxChainVisits {
			visits++
			if pcs := stackOf(e); len(pcs) > 0 {
				carriers = append(carriers, carrier{depth, pcs})
			}
			switch u := e.(type) { //nolint:errorlint // walking the chain one link at a time is the point
			case interface{ Unwrap() []error }:
				for _, b := range u.Unwrap() {
					walk(b, depth+1)
				}
				return
			case interface{ Unwrap() error }:
				e, depth = u.Unwrap(), depth+1
			default:
				return
			}
		}
	}
	walk(err, 0)
	slices.SortStableFunc(carriers, func(a, b carrier) int { return cmp.Compare(b.depth, a.depth) })
	for _, c := range carriers {
		if s := framesSite(c.pcs); s != "" {
			return s
		}
	}
	return ""
}

// stackOf returns the program counters of the stack e carries itself (not
// its chain's), or nil; nil too when a method of e panics.
func stackOf(e error) (pcs []uintptr) {
	defer func() {
		if recover() != nil {
			pcs = nil
		}
	}()
	// github.com/pkg/errors: StackTrace() StackTrace, a []Frame of
	// uintptr. A constant method name keeps the linker's dead code
	// elimination of other methods.
	if m := reflect.ValueOf(e).MethodByName("StackTrace"); m.IsValid() {
		t := m.Type()
		if t.NumIn() == 0 && t.NumOut() == 1 && t.Out(0).Kind() == reflect.Slice && t.Out(0).Elem().Kind() == reflect.Uintptr {
			v := m.Call(nil)[0]
			pcs = make([]uintptr, min(v.Len(), maxFrames))
			for i := range pcs {
				pcs[i] = uintptr(v.Index(i).Uint())
			}
			return pcs
		}
	}
	if c, ok := e.(interface{ Callers() []uintptr }); ok {
		pcs := c.Callers()
		return slices.Clone(pcs[:min(len(pcs), maxFrames)])
	}
	return nil
}

// framesSite returns the site of the first frame of pcs outside the
// runtime, Watermill and surely, or "". The program counters are return
// addresses, as runtime.Callers gives them (a pkg/errors Frame is one:
// its pc method subtracts 1, as runtime.CallersFrames does here).
func framesSite(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !internalFrame(f.Function, f.File) {
			return formatSite(f.Function, f.File, strconv.Itoa(f.Line))
		}
		if !more {
			return ""
		}
	}
}

// stackSite returns the site of the first frame of a stack as
// runtime/debug.Stack prints it outside the runtime, Watermill and surely,
// or "". A frame is a function line ("pkg.F(args)", or "created by pkg.F
// in goroutine 1") followed by a tab and "file.go:line +0x1d".
func stackSite(stack string) string {
	lines := strings.Split(stack, "\n")
	for i := 0; i+1 < len(lines); i++ {
		fn, loc := lines[i], lines[i+1]
		if fn == "" || strings.HasPrefix(fn, "\t") || !strings.HasPrefix(loc, "\t") {
			continue
		}
		i++
		if rest, ok := strings.CutPrefix(fn, "created by "); ok {
			fn, _, _ = strings.Cut(rest, " in goroutine ")
		} else if j := strings.LastIndexByte(fn, '('); j > 0 && strings.HasSuffix(fn, ")") {
			fn = fn[:j]
		}
		loc, _, _ = strings.Cut(strings.TrimPrefix(loc, "\t"), " +0x")
		j := strings.LastIndexByte(loc, ':')
		if j < 0 {
			continue
		}
		file, line := loc[:j], loc[j+1:]
		if _, err := strconv.Atoi(line); err != nil || internalFrame(fn, file) {
			continue
		}
		return formatSite(fn, file, line)
	}
	return ""
}

// internalFrame reports whether the frame of function fn (its full name,
// package path first) in file is the runtime's, Watermill's or surely's
// (but for surely's examples and _test.go files).
func internalFrame(fn, file string) bool {
	switch {
	case !strings.Contains(fn, "."): // panic, as a stack prints it
		return true
	case strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "runtime/"):
		return true
	case strings.HasPrefix(fn, watermillPath):
		return true
	case strings.HasPrefix(fn, surelyPath+"/") || strings.HasPrefix(fn, surelyPath+"."):
		return !strings.HasPrefix(fn, examplesPath) && !strings.HasSuffix(file, "_test.go")
	}
	return false
}

// formatSite is "function (file.go:line)": fn without the package path
// but its last element, file without its directory, each bounded, and
// printable.
func formatSite(fn, file, line string) string {
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		fn = fn[i+1:]
	}
	if i := strings.LastIndexAny(file, `/\`); i >= 0 {
		file = file[i+1:]
	}
	s := clip(fn, maxSiteFunc) + " (" + clip(file, maxSiteFile) + ":" + clip(line, 10) + ")"
	return clip(s, maxSiteLen)
}

// clip returns s, its invalid bytes and unprintable runes replaced by
// "?", cut to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
