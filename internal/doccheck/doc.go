// Package doccheck checks the repository's documentation: every relative
// link of README.md, docs/*.md and adapters/README.md points to a file (and
// to a heading of it, for a #fragment), and every page in docs/ is reached
// from README.md. It has no code of its own: the check is its test.
//
// The commands the pages show are run elsewhere: the README's program by
// examples/readme's test, the examples by .ci/run, the CLI's output by
// cmd/surely's golden files and scripts.
package doccheck
