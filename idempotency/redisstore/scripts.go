package redisstore

import (
	"context"
	"crypto/sha1" // Redis names cached scripts by their SHA-1 digest
	_ "embed"     // the Lua scripts live in lua/*.lua
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/complete.lua
	luaComplete string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/extend.lua
	luaExtend string
	//go:embed lua/get.lua
	luaGet string
	//go:embed lua/batch.lua
	luaBatch string
)

// script is a Lua script and its SHA-1 digest, the name EVALSHA calls it by.
type script struct {
	src, sha string
	name     string // the batch script's name for it, if it takes part
}

func newScript(name, body string) *script {
	src := luaPrelude + body
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:]), name: name}
}

// asFunction makes the body of a one-key script a local Lua function of
// (KEYS, ARGV), so that the batch script runs the very same code.
func asFunction(name, body string) string {
	return "local function " + name + "(KEYS, ARGV)\n" + body + "\nend\n"
}

// The store's scripts. Each one but the batch script touches exactly one
// key, KEYS[1]; the batch script runs claim and complete on several keys.
var (
	scriptClaim    = newScript("claim", luaClaim)
	scriptComplete = newScript("complete", luaComplete)
	scriptRelease  = newScript("", luaRelease)
	scriptExtend   = newScript("", luaExtend)
	scriptGet      = newScript("", luaGet)
	scriptBatch    = newScript("", asFunction("claim", luaClaim)+asFunction("complete", luaComplete)+luaBatch)

	allScripts = []*script{scriptClaim, scriptComplete, scriptRelease, scriptExtend, scriptGet, scriptBatch}
)

// loadScripts loads every script into the server's script cache (on every
// shard of a cluster), so that each call is a single EVALSHA.
func loadScripts(ctx context.Context, c redis.UniversalClient) error {
	loaded := make([]*redis.StringCmd, len(allScripts))
	if cl, ok := c.(*redis.Client); ok {
		// One round trip for all of them.
		_, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sc := range allScripts {
				loaded[i] = p.ScriptLoad(ctx, sc.src)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("redisstore: SCRIPT LOAD: %w", err)
		}
	} else {
		// Cluster and Ring clients send SCRIPT LOAD to every shard themselves.
		for i, sc := range allScripts {
			loaded[i] = c.ScriptLoad(ctx, sc.src)
			if err := loaded[i].Err(); err != nil {
				return fmt.Errorf("redisstore: SCRIPT LOAD: %w", err)
			}
		}
	}
	for i, cmd := range loaded {
		if sha := cmd.Val(); sha != allScripts[i].sha {
			return fmt.Errorf("redisstore: SCRIPT LOAD returned digest %q, want %q", sha, allScripts[i].sha)
		}
	}
	return nil
}

// evalSha runs a loaded script in one round trip. When the server answers
// NOSCRIPT (its script cache was emptied: restart, failover, SCRIPT FLUSH) it
// reloads the scripts and retries once.
func (s *Store) evalSha(ctx context.Context, c redis.Scripter, sc *script, key string, args ...any) (any, error) {
	return s.evalShaKeys(ctx, c, sc, []string{key}, args...)
}

// evalShaKeys is evalSha of a script that takes several keys.
func (s *Store) evalShaKeys(ctx context.Context, c redis.Scripter, sc *script, keys []string, args ...any) (any, error) {
	v, err := c.EvalSha(ctx, sc.sha, keys, args...).Result()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return v, err
	}
	if lerr := s.reloadScripts(ctx); lerr != nil {
		return nil, lerr
	}
	return c.EvalSha(ctx, sc.sha, keys, args...).Result()
}

// reloadScripts loads the scripts again after a NOSCRIPT answer (the
// server's script cache was emptied: restart, failover, SCRIPT FLUSH),
// logging it.
func (s *Store) reloadScripts(ctx context.Context) error {
	s.logger.LogAttrs(ctx, slog.LevelWarn, "redisstore: the server's script cache is empty (restart, failover or SCRIPT FLUSH); reloading the scripts")
	if err := loadScripts(ctx, s.client); err != nil {
		return fmt.Errorf("redisstore: reload after NOSCRIPT: %w", err)
	}
	return nil
}
