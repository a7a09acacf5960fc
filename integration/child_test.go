package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/childproc"
	"github.com/surely-dev/surely/retry"
)

// The environment that turns the test binary into a child consumer.
const (
	childEnv       = "SURELY_INTEGRATION_CHILD"
	childConfigEnv = "SURELY_INTEGRATION_CHILD_CONFIG"
)

// crashPoint is where a child stops dead: it prints "AT <point> <key>
// <attempt>" and blocks until the parent SIGKILLs it.
type crashPoint string

const (
	noCrash crashPoint = ""
	// crashBeforeEffect: in the business handler, before the effect.
	crashBeforeEffect crashPoint = "before_effect"
	// crashAfterEffect: in the business handler, after the effect, before
	// the chain's Complete.
	crashAfterEffect crashPoint = "after_effect"
	// crashAfterComplete: in a router middleware outside the surely chain,
	// after the chain returned nil (Complete committed), before the router
	// acks.
	crashAfterComplete crashPoint = "after_complete"
	// crashAlways: at the start of every attempt, before the effect (a
	// message that kills the process every time).
	crashAlways crashPoint = "always"
)

// childConfig configures a child consumer (JSON in SURELY_INTEGRATION_CHILD_CONFIG).
type childConfig struct {
	Prefix      string        `json:"prefix"`
	Consumer    string        `json:"consumer"`
	Crash       crashPoint    `json:"crash"`
	Lease       time.Duration `json:"lease"`
	MaxAttempts int           `json:"max_attempts"`
	// HandlerSleep is how long the business handler works before its effect.
	HandlerSleep time.Duration `json:"handler_sleep"`
	// ClaimInterval and MaxIdle configure the redisstream subscriber's claim
	// of other consumers' pending entries.
	ClaimInterval time.Duration `json:"claim_interval"`
	MaxIdle       time.Duration `json:"max_idle"`
}

// childMain is a consumer process: a Watermill router reading the test's
// stream through a redisstream consumer group, with handler.New on the Redis
// store and a redisstream dead-letter publisher. It records its effects and
// observations in Redis and prints one line per event on stdout:
//
//	READY <consumer>
//	RUN <key> <attempt> <previous> <consumer>
//	AT <crash point> <key> <attempt>
//	OUTCOME <outcome> <key> <attempt> <reason>
func childMain() int {
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	return 0
}

func runChild() error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	n := names{Prefix: cfg.Prefix}
	ctx, cancel := childproc.ChildContext()
	defer cancel()

	opt, err := redis.ParseURL(os.Getenv("SURELY_REDIS_URL"))
	if err != nil {
		return err
	}
	// Three clients: the redisstream subscriber and publisher close the
	// client they are given, so neither shares the store's.
	rdb := redis.NewClient(opt)
	subClient := redis.NewClient(opt)
	pubClient := redis.NewClient(opt)

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	wlogger := watermill.NewSlogLogger(logger.With("consumer", cfg.Consumer))

	store, err := redisstore.New(ctx, rdb, redisstore.WithPrefix(n.StorePrefix()))
	if err != nil {
		return err
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:                        subClient,
		Consumer:                      cfg.Consumer,
		ConsumerGroup:                 n.Group(),
		NackResendSleep:               50 * time.Millisecond, // a nack is an in-process resend: do not spin
		BlockTime:                     100 * time.Millisecond,
		ClaimInterval:                 cfg.ClaimInterval,
		MaxIdleTime:                   cfg.MaxIdle,
		DisableIndefiniteInitialBlock: true,
	}, wlogger)
	if err != nil {
		return err
	}
	deadPub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: pubClient}, wlogger)
	if err != nil {
		return err
	}

	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	crash := func(point crashPoint, key string, attempt int) {
		say("AT %s %s %d", point, key, attempt)
		time.Sleep(time.Hour) // the parent SIGKILLs us here
	}

	business := func(msg *message.Message) ([]*message.Message, error) {
		mctx := msg.Context()
		op, ok := idempotency.OperationFrom(mctx)
		if !ok {
			return nil, errors.New("no operation in the context")
		}
		prev := string(op.Previous)
		if prev == "" {
			prev = "none"
		}
		if err := rdb.HSet(mctx, n.Previous(), op.Key+":"+strconv.Itoa(op.Attempt), prev).Err(); err != nil {
			return nil, err
		}
		if err := rdb.RPush(mctx, n.Runs(), fmt.Sprintf("start %s %d %s %d", op.Token, op.Attempt, cfg.Consumer, time.Now().UnixMilli())).Err(); err != nil {
			return nil, err
		}
		say("RUN %s %d %s %s", op.Key, op.Attempt, prev, cfg.Consumer)
		if cfg.Crash == crashBeforeEffect || cfg.Crash == crashAlways {
			crash(cfg.Crash, op.Key, op.Attempt)
		}
		if cfg.HandlerSleep > 0 {
			t := time.NewTimer(cfg.HandlerSleep)
			select {
			case <-t.C:
			case <-mctx.Done():
				t.Stop()
				return nil, mctx.Err()
			}
		}
		// The business effect.
		if err := rdb.HIncrBy(mctx, n.Effects(), op.Key, 1).Err(); err != nil {
			return nil, err
		}
		if err := rdb.RPush(mctx, n.Runs(), fmt.Sprintf("end %s %d %s %d", op.Token, op.Attempt, cfg.Consumer, time.Now().UnixMilli())).Err(); err != nil {
			return nil, err
		}
		if cfg.Crash == crashAfterEffect {
			crash(cfg.Crash, op.Key, op.Attempt)
		}
		return nil, nil
	}

	policy, err := retry.NewPolicy(
		retry.WithMaxAttempts(cfg.MaxAttempts),
		retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond),
		retry.WithMaxInProcessTime(cfg.Lease/2),
	)
	if err != nil {
		return err
	}
	h, err := handler.New(business,
		handler.WithStore(&refusalRecorder{Store: store, rdb: rdb, list: n.InProgress()}, namespace),
		handler.WithDeadLetter(deadPub, n.Dead()),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(cfg.Lease),
		handler.WithConsumerGroup(n.Group()),
		handler.WithLogger(logger),
		handler.WithOnOutcome(func(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
			key := p.Msg.Metadata.Get(idempotency.DefaultMetadataKey)
			bctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = rdb.HIncrBy(bctx, n.Outcomes(), cfg.Consumer+"|"+string(p.Outcome), 1).Err()
			say("OUTCOME %s %s %d %s", p.Outcome, key, p.Attempt, p.Reason)
			return handler.OutcomeResult{}
		}),
	)
	if err != nil {
		return err
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, wlogger)
	if err != nil {
		return err
	}
	if cfg.Crash == crashAfterComplete {
		// Outside the surely chain: it returned nil, so Complete committed,
		// and the router has not acked yet.
		router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				msgs, err := next(msg)
				if err == nil {
					crash(crashAfterComplete, msg.Metadata.Get(idempotency.DefaultMetadataKey), 0)
				}
				return msgs, err
			}
		})
	}
	router.AddConsumerHandler("orders", n.Stream(), sub, handler.NoPublish(h))

	errc := make(chan error, 1)
	go func() { errc <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-errc:
		return fmt.Errorf("router: %w", err)
	}
	say("READY %s", cfg.Consumer)
	return <-errc
}

// refusalRecorder records, in a Redis list, the local time (unix ms) at which
// each Claim that returned InProgress was made: proof that another owner's
// lease was still live at that moment.
type refusalRecorder struct {
	idempotency.Store
	rdb  *redis.Client
	list string
}

func (r *refusalRecorder) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	at := time.Now().UnixMilli()
	res, err := r.Store.Claim(ctx, req)
	if err == nil && res.Status == idempotency.InProgress {
		_ = r.rdb.RPush(ctx, r.list, at).Err()
	}
	return res, err
}
