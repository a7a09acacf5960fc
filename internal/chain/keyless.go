package chain

// KeylessNamespace is the store namespace of the attempt records of
// messages without a key (ProcessWithoutDedup). It is reserved:
// middleware.Dedup and handler.WithStore refuse it as a handler's
// namespace.
const KeylessNamespace = "surely.keyless"
