package outbox

// Table returns the name of the outbox table.
func (o *Outbox) Table() string { return o.table }

// OffsetsTable returns the name of the forwarders' offsets table.
func (o *Outbox) OffsetsTable() string { return o.offsetsTable() }

// Unexported values the tests check.
var (
	DefaultTable       = defaultTable
	ErrForwarderClosed = errForwarderClosed
)
