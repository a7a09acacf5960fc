package sqs

// ErrSettled is what Extend returns after the message was acked or nacked.
var ErrSettled = errSettled
