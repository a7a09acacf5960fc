package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surely-dev/surely/retry"
)

func ExampleNewPolicy() {
	policy, err := retry.NewPolicy(
		retry.WithMaxAttempts(10),
		retry.WithInProcessAttempts(3),
		retry.WithBackoff(200*time.Millisecond, 5*time.Second),
		// Tests pin the jitter; production leaves it random.
		retry.WithRand(func() float64 { return 0.5 }),
	)
	if err != nil {
		panic(err)
	}
	fmt.Println("budget:", policy.MaxAttempts(), "attempts,", policy.InProcessAttempts(), "per delivery")
	failure := errors.New("connection refused")
	for n := 1; n <= 6; n++ {
		fmt.Printf("after attempt %d: wait %v\n", n, policy.Delay(n, failure))
	}

	_, err = retry.NewPolicy(retry.WithMaxAttempts(0))
	fmt.Println(errors.Is(err, retry.ErrInvalidOption))
	// Output:
	// budget: 10 attempts, 3 per delivery
	// after attempt 1: wait 150ms
	// after attempt 2: wait 300ms
	// after attempt 3: wait 600ms
	// after attempt 4: wait 1.2s
	// after attempt 5: wait 2.4s
	// after attempt 6: wait 3.75s
	// true
}

var errInvalidAmount = errors.New("invalid amount")

// charge stands for a business handler that classifies its errors.
func charge(amount int, rateLimited bool) error {
	if amount <= 0 {
		return retry.Permanent(fmt.Errorf("charge %d: %w", amount, errInvalidAmount))
	}
	if rateLimited {
		// e.g. from the payment API's Retry-After header
		return retry.After(30*time.Second, errors.New("payment api: 429 too many requests"))
	}
	return nil
}

func ExamplePermanent() {
	ctx := context.Background()
	err := fmt.Errorf("handle order 42: %w", charge(-5, false))

	fmt.Println(err)
	fmt.Println(retry.Classify(ctx, err))
	fmt.Println(errors.Is(err, errInvalidAmount))
	// Output:
	// handle order 42: charge -5: invalid amount
	// permanent
	// true
}

func ExampleAfter() {
	ctx := context.Background()
	policy, err := retry.NewPolicy()
	if err != nil {
		panic(err)
	}
	err = fmt.Errorf("handle order 42: %w", charge(100, true))

	d, ok := retry.AfterDelay(err)
	fmt.Println(retry.Classify(ctx, err), d, ok)
	fmt.Println("wait:", policy.Delay(1, err))
	// Output:
	// transient 30s true
	// wait: 30s
}

func ExampleClassify() {
	ctx, cancel := context.WithCancel(context.Background())
	err := fmt.Errorf("query: %w", context.Canceled)
	fmt.Println(retry.Classify(ctx, err)) // the delivery goes on: this attempt failed
	cancel()
	fmt.Println(retry.Classify(ctx, err)) // the consumer is shutting down
	// Output:
	// transient
	// canceled
}

func ExampleBreaker() {
	breaker, err := retry.NewBreaker(retry.WithCooldown(5*time.Second, time.Minute))
	if err != nil {
		panic(err)
	}
	// In the retry middleware, around each attempt:
	permit := breaker.Allow()
	if !permit.Allowed {
		fmt.Println("nack with delay", permit.Wait) // no attempt spent
		return
	}
	var attemptErr error // = the handler's error
	if attemptErr == nil {
		breaker.Record(permit, retry.SignalSuccess)
	} else {
		breaker.Record(permit, retry.SignalOf(retry.Classify(context.Background(), attemptErr)))
	}
	fmt.Println(breaker.State())
	// Output:
	// closed
}
