package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/adapters/amqp"
	"github.com/surely-dev/surely/adapters/kafka"
	"github.com/surely-dev/surely/adapters/nats"
	"github.com/surely-dev/surely/adapters/redisstream"
	surelysql "github.com/surely-dev/surely/adapters/sql"
	"github.com/surely-dev/surely/adapters/sqs"
	"github.com/surely-dev/surely/cmd/surely/internal/endpoint"
)

// The brokers a replay publishes to (--to), by URL scheme. Each is
// opened with surely's own adapter and its safe defaults: publisher
// confirms and persistent messages (RabbitMQ), a JetStream ack (NATS), an
// acknowledgement by every in-sync replica (Kafka), one transaction per
// Publish (PostgreSQL). None creates a topic, queue, stream or table that
// is missing, except RabbitMQ's publisher, which declares a missing queue
// as surely's subscriber would.
//
//	nats://host:port                         NATS JetStream (tls:// too)
//	amqp://user:pass@host:port/vhost         RabbitMQ (amqps:// too)
//	redis://[user:pass@]host:port[/db]       Redis Streams (rediss:// too)
//	kafka://host:port[,host:port...]         Kafka
//	sqs://REGION[?endpoint=URL]              Amazon SQS (endpoint: an emulator or a VPC endpoint);
//	                                         credentials from AWS_ACCESS_KEY_ID,
//	                                         AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
//	postgres://user:pass@host:port/db?...    PostgreSQL through watermill-sql (postgresql:// too)
const brokerSchemes = "nats://, amqp://, redis:// (Redis Streams), kafka://, sqs:// or postgres:// (watermill-sql)"

// sqsClientOptions are added to the SQS client of an sqs:// broker. The
// tests point it at the in-process emulator's transport (goaws speaks the
// query protocol, the SDK JSON).
var sqsClientOptions []func(*awssqs.Options)

// openBroker returns a publisher to the broker of raw; closing it releases
// every connection it opened.
func (a *app) openBroker(raw string) (message.Publisher, error) {
	if raw == "" {
		return nil, usageErr("no broker to replay to: pass --to URL (or set SURELY_BROKER_URL), one of %s", brokerSchemes)
	}
	a.secretsOf(raw)
	if p, ok := a.memBrokers[raw]; ok {
		return p, nil
	}
	scheme, _, _ := strings.Cut(raw, "://")
	open, ok := brokerOpeners[strings.ToLower(scheme)]
	if !ok {
		return nil, usageErr("unsupported broker %q: want %s", endpoint.Redact(raw), brokerSchemes)
	}
	p, err := open(raw)
	if err != nil {
		if errors.Is(err, endpoint.ErrInvalid) {
			return nil, withCode(exitUsage, err)
		}
		return nil, fmt.Errorf("broker %s: %w", endpoint.Redact(raw), err)
	}
	return p, nil
}

// brokerOpeners open a broker URL by its scheme.
var brokerOpeners = map[string]func(raw string) (message.Publisher, error){
	"nats":       openNATS,
	"tls":        openNATS,
	"amqp":       openAMQP,
	"amqps":      openAMQP,
	"redis":      openRedisStreams,
	"rediss":     openRedisStreams,
	"kafka":      openKafka,
	"sqs":        openSQS,
	"postgres":   openPostgres,
	"postgresql": openPostgres,
}

// invalid is a usage error about the broker URL raw, shown redacted.
func invalid(raw, format string, args ...any) error {
	return fmt.Errorf("%w: broker %q: %s", endpoint.ErrInvalid, endpoint.Redact(raw), fmt.Sprintf(format, args...))
}

// parseBrokerURL parses raw, keeping only the cause of a parse error (a
// *url.Error would quote the URL, password and all).
func parseBrokerURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, invalid(raw, "%v", err)
	}
	if u.Host == "" {
		return nil, invalid(raw, "no host")
	}
	return u, nil
}

func openNATS(raw string) (message.Publisher, error) {
	if _, err := parseBrokerURL(raw); err != nil {
		return nil, err
	}
	pub, err := nats.NewPublisher(raw)
	if err != nil {
		return nil, err
	}
	return natsHintPublisher{pub}, nil
}

func openAMQP(raw string) (message.Publisher, error) {
	if _, err := parseBrokerURL(raw); err != nil {
		return nil, err
	}
	return amqp.NewPublisher(raw)
}

func openRedisStreams(raw string) (message.Publisher, error) {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, invalid(raw, "%v", err)
	}
	return redisstream.NewPublisher(&redis.UniversalOptions{
		Addrs: []string{opts.Addr}, DB: opts.DB, Username: opts.Username, Password: opts.Password,
		TLSConfig: opts.TLSConfig, ClientName: "surely-replay",
	})
}

// openKafka opens kafka://host:port[,host:port...]: the bootstrap brokers,
// with no path, query or user info.
func openKafka(raw string) (message.Publisher, error) {
	rest := raw[len("kafka://"):]
	if rest == "" || strings.ContainsAny(rest, "/?#@") {
		return nil, invalid(raw, "want kafka://host:port[,host:port...]")
	}
	brokers := strings.Split(rest, ",")
	for _, b := range brokers {
		if !strings.Contains(b, ":") {
			return nil, invalid(raw, "broker %q has no port", b)
		}
	}
	return kafka.NewPublisher(brokers)
}

// openSQS opens sqs://REGION[?endpoint=URL].
func openSQS(raw string) (message.Publisher, error) {
	u, err := parseBrokerURL(raw)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if u.Path != "" && u.Path != "/" || u.User != nil {
		return nil, invalid(raw, "want sqs://REGION[?endpoint=URL]")
	}
	opts := append([]func(*awssqs.Options){}, sqsClientOptions...)
	if e := q.Get("endpoint"); e != "" {
		if eu, err := url.Parse(e); err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
			return nil, invalid(raw, "endpoint %q is not an http(s) URL", e)
		}
		q.Del("endpoint")
		opts = append(opts, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(e) })
	}
	if len(q) > 0 {
		return nil, invalid(raw, "unknown parameters (want only endpoint)")
	}
	cfg := aws.Config{Region: u.Host, Credentials: envCredentials()}
	return sqs.NewPublisher(cfg, sqs.WithClientOptions(opts...))
}

// envCredentials reads the AWS credentials of the environment. Without
// them requests go unsigned (an emulator takes them; AWS refuses them with
// an error that says so).
func envCredentials() aws.CredentialsProvider {
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || secret == "" {
		return aws.AnonymousCredentials{}
	}
	token := os.Getenv("AWS_SESSION_TOKEN")
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: token, Source: "environment"}, nil
	})
}

// openPostgres opens a PostgreSQL database for watermill-sql's tables.
func openPostgres(raw string) (message.Publisher, error) {
	if _, err := parseBrokerURL(raw); err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", raw)
	if err != nil {
		return nil, invalid(raw, "%v", err)
	}
	db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("ping: %w", err)
	}
	p, err := surelysql.NewPublisher(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &ownedDB{Publisher: p, db: db}, nil
}

// ownedDB is a publisher on a database it owns: Close closes both.
type ownedDB struct {
	*surelysql.Publisher
	db *sql.DB
}

func (o *ownedDB) Close() error { return errors.Join(o.Publisher.Close(), o.db.Close()) }
