/*
 * surely's dedup protocol for one operation key: claim / complete /
 * release / extend with fencing tokens, two consumers, a broker that
 * redelivers an unacked message to any consumer at any time, leases that
 * expire at any time, records that expire after their retention, a replay
 * of the dead letter that reopens the record once per replay run, a
 * second message with the same key and another payload (conflict), reply
 * loss with client re-sends (the request ids), a failing dead-letter
 * publish, a shutdown that cancels the handler, and a crash after every
 * step. See README.md in this directory for what is abstracted.
 *
 * Build flags (spin -D...):
 *   INBOX      transactional inbox: effect and DONE commit atomically
 *              (sqlstore.Inbox); without it, lease mode (effect outside
 *              the store, Complete after it).
 *   INTX       (implies INBOX) sqlstore.WithInTxClaims as well: a first
 *              delivery from a broker that counts deliveries claims, runs
 *              the effect and marks DONE in one transaction, step by step,
 *              holding the row lock; a crash anywhere inside rolls all of
 *              it back. Any other delivery (a redelivery, a replay, or a
 *              process's first inbox call) commits its claim first.
 *   POISON     message 0 kills the process on every attempt (the handler
 *              never returns): it must end dead-lettered, after at most
 *              KILL_BOUND deaths.
 *   NO_REPLAY, NO_CONFLICT, NO_EXPIRY  leave a feature out (smaller runs).
 *
 * Runs that must find a violation (check.sh expects each to fail; the
 * comment names the assertion that catches it):
 *   EXPECT_DUP    lease mode allows a second effect (not promised):
 *                 "lease mode: one effect" in the success path.
 *   EXPECT_KILL_BUDGET  (INTX, POISON) asserts the budget alone bounds the
 *                 deaths, which the one transaction does not promise: its
 *                 first delivery's death leaves no record (why the bound
 *                 is one more): "a message that kills every attempt is
 *                 dead-lettered within its budget" (at the kill).
 *   STALE_VERDICT the release path before its fix: a stale owner's
 *                 permanent error was dead-lettered: "a dead letter only
 *                 for a final record" (DL_FINAL).
 *   MUTANT_COMPLETE_UNFENCED  (a) Complete without the token check:
 *                 "accepted only from the newest claim" (ACCEPTED).
 *   MUTANT_RELEASE_UNFENCED   (b) Release without the token check: ACCEPTED.
 *   MUTANT_EXTEND_UNFENCED    (c) Extend without the token check: ACCEPTED.
 *   MUTANT_TAKEOVER_NO_COUNT  (d) a takeover of an expired lease does not
 *                 count an attempt: "every claim gets a new attempt number"
 *                 (in GRANT), and in longer runs "the budget bounds the
 *                 claims" (CHECK).
 *   MUTANT_COMPLETE_NEW_ID    (e) the retry of a Complete whose reply was
 *                 lost carries a new request id, so the store does not
 *                 know it as the call it already applied: "an applied
 *                 Complete is reported as applied" (after the Complete).
 *   MUTANT_SHUTDOWN_DEADLETTERS  a shutdown's permanent error is
 *                 dead-lettered instead of nacked: DL_FINAL.
 *   MUTANT_FINAL_NOT_RECORDED    a handler's final error leaves the record
 *                 FAILED (re-claimable) while it is dead-lettered: DL_FINAL.
 *   MUTANT_INTX_DONE_OUTSIDE     (INTX) the one transaction commits the
 *                 claim and the effect, and DONE is written after it, in a
 *                 commit of its own: a crash between them runs the effect
 *                 twice: "never two effects" (CHECK).
 *   MUTANT_INTX_UNCOUNTED        (INTX, POISON) the attempt count is not
 *                 persisted: every delivery, redeliveries included, claims
 *                 inside the effect's transaction, so every crash rolls its
 *                 attempt back: "a message that kills every attempt is
 *                 dead-lettered within its budget" (at the kill).
 *   MUTANT_INTX_ACK_BEFORE_COMMIT (INTX) the message is acked when the
 *                 handler returns, before COMMIT; a crash then rolls the
 *                 effect back under an acked message: "an acked message's
 *                 effect committed" (at the rollback).
 */

#ifdef INTX
#ifndef INBOX
#define INBOX
#endif
#endif

#ifndef MAX_ATTEMPTS
#define MAX_ATTEMPTS 2   /* the durable attempt budget */
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 2    /* process deaths, over both consumers */
#endif
#ifndef MAX_DL_FAILS
#define MAX_DL_FAILS 1   /* failed dead-letter publishes */
#endif
#ifndef MAX_RESENDS
#define MAX_RESENDS 1    /* store replies lost and re-sent */
#endif
#ifndef MAX_SHUTDOWNS
#define MAX_SHUTDOWNS 1  /* handlers canceled by a shutdown */
#endif
#ifndef MAX_EXPIRIES
#ifdef NO_EXPIRY
#define MAX_EXPIRIES 0
#else
#define MAX_EXPIRIES 1   /* records forgotten after their retention */
#endif
#endif

mtype = { NONE, INPROG, FAILED, DONE, EXH };                           /* record state */
mtype = { ACQUIRED, COMPLETED, INPROGRESS, EXHAUSTED, CONFLICT };      /* claim result */

/* Handler results and dead-letter reasons. */
#define R_TRANSIENT 1
#define R_PERMANENT 2
#define R_CANCELED  3
#define R_EXHAUSTED 4
#define R_CONFLICT  5

/* The messages: 0 the original, 1 its replay (run id 1, sent once the
 * original was dead-lettered), 2 another payload under the same key. */
#define FP(m)     (m == 2 -> 2 : 1)   /* payload fingerprint, as a bit */
#define REOPEN(m) (m == 1 -> 1 : 0)   /* dlq.KeyReplayID */

/* The store's record of the key. */
mtype state = NONE;
byte  fp = 0;         /* fingerprint of the payload that created it */
byte  cur = 0;        /* current fencing token (0: none) */
byte  minted = 0;     /* tokens handed out so far (never reused) */
byte  attempts = 0;   /* every claim ever made */
byte  refunded = 0;   /* attempts canceled by a shutdown, not charged */
byte  base = 0;       /* attempts-refunded when a replay last reopened it */
byte  reopened = 0;   /* the replay run id that last reopened it */
bool  live = false;   /* the current lease has not expired */
byte  lastreq = 0;    /* request id of the last Complete/Release applied */
#define CHARGED (attempts - refunded - base)

/* Ghost state: what the specification says, kept beside the store so that
 * a mutant of a store step cannot change it. Reset when the record expires. */
byte  holder = 0;     /* token of the newest claim granted */
byte  lastatt = 0;    /* attempt number of the newest claim granted */
byte  grants = 0;     /* claims granted since creation or the last reopen */
byte  grefunds = 0;   /* of those, canceled by a shutdown */
byte  donetok = 0;    /* the token whose Complete made the record DONE */
bool  finaldl = false;/* its message was dead-lettered as final */
byte  effects = 0;    /* business effects committed while the record lives */
byte  epoch = 0;      /* record lifetimes (retention expiries) */
byte  donefp = 0;     /* payloads (bits) whose operation ever committed */
byte  effp = 0;       /* inbox mode: payloads (bits) whose effect ever committed */
byte  kills = 0;      /* POISON: deaths of the process in message 0's handler */

#ifdef INTX
/* The one-transaction inbox: the row lock (the pid of the consumer whose
 * transaction holds it; 0: none), and the committed record and ghost
 * state as they were at BEGIN, restored by a rollback. */
byte  txlock = 0;
mtype t_state = NONE;
byte  t_fp, t_cur, t_minted, t_attempts, t_refunded, t_base, t_reopened, t_lastreq;
bool  t_live, t_finaldl;
byte  t_holder, t_lastatt, t_grants, t_grefunds, t_donetok, t_effects, t_donefp, t_effp;
bool  delivered[3];   /* the broker delivered message m before: its count is > 1 */
#endif

/* The world outside the store. */
bool  acked[3];
bool  dl[3];          /* a dead letter of message m was published */
bool  sent1 = false;  /* the replay was published */
#ifdef NO_CONFLICT
#define sent2 false
#else
#define sent2 true
#endif
byte  crashes = 0;
byte  dlfails = 0;
byte  resends = 0;
byte  shutdowns = 0;
byte  expiries = 0;
byte  reqs = 0;       /* request ids minted */

/* The fence each store step applies before it changes the record on
 * behalf of a lease holder. The mutants drop the token comparison. */
#define FENCED(tok)   (state == INPROG && cur == tok && tok != 0)
#ifdef MUTANT_COMPLETE_UNFENCED
#define FENCED_COMPLETE(tok) (state == INPROG)
#else
#define FENCED_COMPLETE(tok) FENCED(tok)
#endif
#ifdef MUTANT_RELEASE_UNFENCED
#define FENCED_RELEASE(tok) (state == INPROG)
#else
#define FENCED_RELEASE(tok) FENCED(tok)
#endif
#ifdef MUTANT_EXTEND_UNFENCED
#define FENCED_EXTEND(tok) (state == INPROG)
#else
#define FENCED_EXTEND(tok) FENCED(tok)
#endif

/* ACCEPTED: a Complete, Release, Extend or inbox commit is applied only for
 * the newest claim granted (by the ghost, not by the store's token). */
#define ACCEPTED(tok) assert(tok == holder && tok != 0)

/* CHECK, after every store step:
 *   the attempt count never decreases (within a record's life);
 *   the budget bounds the claims: claims granted since creation or the
 *     last reopen, less the canceled ones, never pass MAX_ATTEMPTS;
 *   DL_FINAL (kept): a record whose message was dead-lettered as final
 *     stays EXHAUSTED until a replay reopens it or it expires;
 *   in inbox mode, never two effects while the record lives. */
#ifdef INBOX
#define CHECK_EFFECTS assert(effects <= 1)
#else
#define CHECK_EFFECTS skip
#endif
#define CHECK(before) \
	assert(attempts >= before); \
	assert(grants - grefunds <= MAX_ATTEMPTS); \
	assert(!finaldl || state == EXH); \
	CHECK_EFFECTS; \
	before = 0; takeover = false

/* The row lock an open one-transaction inbox holds: every other store
 * step on the key waits for its COMMIT or rollback (a claim's INSERT or
 * SELECT ... FOR UPDATE, an Extend, a Purge: on SQLite the database's
 * write lock). The first statement of each store step. */
#ifdef INTX
#define LOCKFREE (txlock == 0 || txlock == _pid)
#else
#define LOCKFREE skip
#endif

#ifdef INTX
#define UNLOCKED (txlock == 0)
#else
#define UNLOCKED true
#endif

/* Inbox mode: no message acked without its effect committed or its dead
 * letter published (checked at the ack and where a rollback could take an
 * effect away). Lease mode promises no more than the DONE record. */
#ifdef INBOX
#define ACKED_OK(m) assert(!acked[m] || (effp & FP(m)) != 0 || dl[m])
#else
#define ACKED_OK(m) skip
#endif

/* POISON: message 0's handler kills the process on every attempt. Each
 * claimed attempt is charged before its effect, so the budget bounds the
 * deaths; with INTX the first delivery's one transaction leaves no record,
 * so one more. */
#ifdef POISON
#define POISONED(m) (m == 0)
#else
#define POISONED(m) false
#endif
#if defined(INTX) && !defined(EXPECT_KILL_BUDGET)
#define KILL_BOUND (MAX_ATTEMPTS + 1)
#else
#define KILL_BOUND MAX_ATTEMPTS
#endif
#define KILLED \
	kills++; \
	assert(kills <= KILL_BOUND)   /* a message that kills every attempt is dead-lettered within its budget */

/* A crash: the process dies here, its delivery goes back to the broker,
 * its lease (if any) is left to expire. */
#define CRASH_POINT \
	if \
	:: crashes < MAX_CRASHES -> crashes++; goto deliver \
	:: true -> skip \
	fi

/* A claim is granted: a new token and a new attempt number. */
#ifdef MUTANT_TAKEOVER_NO_COUNT
#define COUNT_ATTEMPT if :: !takeover -> attempts++ :: else -> skip fi
#else
#define COUNT_ATTEMPT attempts++
#endif
#define GRANT \
	COUNT_ATTEMPT; minted++; cur = minted; tok = cur; \
	state = INPROG; live = true; res = ACQUIRED; \
	assert(attempts > lastatt);   /* every claim gets a new attempt number */ \
	lastatt = attempts; holder = cur; grants++

/* The claim's decision, one atomic step of the store (below). */
inline claim_body(m, tok, res) {
		before = attempts; takeover = false;
		myepoch = epoch;
		if
		:: state != NONE && fp != FP(m) -> res = CONFLICT
		:: state == DONE && fp == FP(m) -> res = COMPLETED
		:: state == INPROG && fp == FP(m) && cur == tok && tok != 0 -> res = ACQUIRED  /* re-send */
		:: state == INPROG && fp == FP(m) && cur != tok && live -> res = INPROGRESS
		:: state == NONE ->
			fp = FP(m); reopened = REOPEN(m); GRANT
		:: (state == FAILED || state == EXH || (state == INPROG && cur != tok && !live)) && fp == FP(m) ->
			if
			:: state == INPROG -> state = FAILED; takeover = true
			:: else -> skip
			fi;
			if
			:: (state == FAILED || state == EXH) && REOPEN(m) != 0 && REOPEN(m) != reopened ->
				/* a fresh budget, once per replay run */
				reopened = REOPEN(m); base = attempts - refunded;
				grants = 0; grefunds = 0; finaldl = false
			:: else -> skip
			fi;
			if
			:: state == EXH -> res = EXHAUSTED
			:: state != EXH && CHARGED >= MAX_ATTEMPTS -> state = EXH; live = false; res = EXHAUSTED
			:: state != EXH && CHARGED < MAX_ATTEMPTS -> GRANT
			fi
		fi;
		CHECK(before)
}

/* Claim (memstore.Claim, claim.lua), atomic in the store, checks in the
 * stores' order: conflict, DONE, live lease, then an expired lease is taken
 * over (FAILED), a replay reopens a FAILED or EXHAUSTED record once per run,
 * and the budget decides. A re-send of a claim whose reply was lost carries
 * the same token and is answered again. */
inline claim(m, tok, res) {
	d_step {
		LOCKFREE;
		claim_body(m, tok, res)
	}
}

#ifdef INTX
/* The one transaction (sqlstore's inboxOneTx): BEGIN, then the claim's
 * INSERT (or, for a key with a row, the general claim) takes the row lock
 * until COMMIT or rollback. The record as committed is kept for the
 * rollback. */
inline txclaim(m, tok, res) {
	d_step {
		LOCKFREE;
		txlock = _pid;
		t_state = state; t_fp = fp; t_cur = cur; t_minted = minted; t_attempts = attempts;
		t_refunded = refunded; t_base = base; t_reopened = reopened; t_lastreq = lastreq;
		t_live = live; t_finaldl = finaldl; t_holder = holder; t_lastatt = lastatt;
		t_grants = grants; t_grefunds = grefunds; t_donetok = donetok; t_effects = effects;
		t_donefp = donefp; t_effp = effp;
		claim_body(m, tok, res)
	}
}

/* The transaction's end: COMMIT keeps what it wrote; a rollback (a crash,
 * which closes the connection, or a failed handler) restores the record as
 * committed. Neither is visible to anyone but the lock holder before. */
#define TX_FORGET \
	t_state = NONE; t_fp = 0; t_cur = 0; t_minted = 0; t_attempts = 0; \
	t_refunded = 0; t_base = 0; t_reopened = 0; t_lastreq = 0; \
	t_live = false; t_finaldl = false; t_holder = 0; t_lastatt = 0; \
	t_grants = 0; t_grefunds = 0; t_donetok = 0; t_effects = 0; \
	t_donefp = 0; t_effp = 0; txlock = 0
#define TX_COMMIT d_step { TX_FORGET }
#define TX_ROLLBACK d_step { \
	state = t_state; fp = t_fp; cur = t_cur; minted = t_minted; attempts = t_attempts; \
	refunded = t_refunded; base = t_base; reopened = t_reopened; lastreq = t_lastreq; \
	live = t_live; finaldl = t_finaldl; holder = t_holder; lastatt = t_lastatt; \
	grants = t_grants; grefunds = t_grefunds; donetok = t_donetok; effects = t_effects; \
	donefp = t_donefp; effp = t_effp; \
	TX_FORGET; \
	tok = 0;   /* the token died with the transaction */ \
	ACKED_OK(0); ACKED_OK(1); ACKED_OK(2) }

/* A crash inside the transaction: the database rolls it back. */
#define TX_CRASH_POINT \
	if \
	:: crashes < MAX_CRASHES -> crashes++; TX_ROLLBACK; goto deliver \
	:: true -> skip \
	fi
#endif


/* Extend (extend.lua). */
inline extend(tok, ok) {
	d_step {
		LOCKFREE;
		before = attempts;
		if
		:: FENCED_EXTEND(tok) -> ACCEPTED(tok); live = true; ok = true
		:: else -> ok = false
		fi;
		CHECK(before)
	}
}

/* Complete (complete.lua): a re-send of the very call that was applied
 * answers success again; otherwise the token must be current. */
inline complete(tok, req, ok) {
	d_step {
		LOCKFREE;
		before = attempts;
		if
		:: lastreq == req && req != 0 -> ok = true
		:: lastreq != req && FENCED_COMPLETE(tok) ->
			ACCEPTED(tok); state = DONE; live = false; lastreq = req; ok = true;
			donetok = tok; donefp = donefp | fp
		:: else -> ok = false
		fi;
		CHECK(before)
	}
}

/* Release (release.lua): a permanent error makes the record EXHAUSTED, a
 * canceled attempt (shutdown) is refunded, anything else leaves it FAILED. */
inline release(tok, req, kind, ok) {
	d_step {
		LOCKFREE;
		before = attempts;
		if
		:: lastreq == req && req != 0 -> ok = true
		:: lastreq != req && FENCED_RELEASE(tok) ->
			ACCEPTED(tok);
			if
			:: kind == R_CANCELED -> state = FAILED; refunded++; grefunds++
#ifdef MUTANT_FINAL_NOT_RECORDED
			:: kind == R_PERMANENT -> state = FAILED
#else
			:: kind == R_PERMANENT -> state = EXH
#endif
			:: kind == R_TRANSIENT -> state = FAILED
			fi;
			live = false; lastreq = req; ok = true
		:: else -> ok = false
		fi;
		CHECK(before)
	}
}

/* The transactional inbox (sqlstore.Inbox): lock the row, check the token,
 * run the effect, mark DONE, commit; a stale owner rolls back. A crash
 * inside the transaction rolls it back: both or neither. */
inline inbox(tok, ok) {
	d_step {
		LOCKFREE;
		before = attempts;
		if
		:: FENCED(tok) ->
			ACCEPTED(tok);
			effects++; effp = effp | fp; state = DONE; live = false; ok = true;
			donetok = tok; donefp = donefp | fp
		:: else -> ok = false
		fi;
		CHECK(before)
	}
}

/* One consumer process: the router, handler.New's chain and the business
 * handler, restarted after every crash or shutdown. It takes any unacked
 * message; with none left it waits (a valid end state). */
proctype consumer() {
	byte m, tok, req, kind, reason, before, myepoch;
	mtype res;
	bool ok, takeover;
#ifdef INTX
	bool first;           /* the broker's first delivery of m (count 1) */
#endif

deliver:
	m = 0; tok = 0; req = 0; kind = 0; reason = 0; before = 0; myepoch = 0;
	ok = false; takeover = false; res = 0;
#ifdef INTX
	first = false;
#endif
end_wait:
	if
	:: !acked[0] -> m = 0
	:: sent1 && !acked[1] -> m = 1
	:: sent2 && !acked[2] -> m = 2
	fi;

#ifdef INTX
	/* The broker counts the delivery. A first delivery (count 1, not a
	 * replay) may take the one transaction; a process's first inbox call
	 * (before the inbox accepted), a redelivery and a replay commit their
	 * claim first: the general path below, whose claim, fenced DONE and
	 * effect are those of sqlstore's inboxClaimed as well. */
	d_step { first = !delivered[m]; delivered[m] = true };
	if
#ifdef MUTANT_INTX_UNCOUNTED
	:: REOPEN(m) == 0 -> goto onetx
#else
	:: first && REOPEN(m) == 0 -> goto onetx
#endif
	:: true -> skip
	fi;
#endif

	claim(m, tok, res);
	CRASH_POINT;
	if
	:: resends < MAX_RESENDS && res == ACQUIRED ->
		/* the reply was lost: the client re-sends the same claim */
		resends++; claim(m, tok, res); CRASH_POINT
	:: true -> skip
	fi;
dispatch:
	if
	:: res == COMPLETED -> goto acking        /* duplicate: re-emit and ack */
	:: res == INPROGRESS -> goto deliver      /* nack with a delay */
	:: res == EXHAUSTED -> reason = R_EXHAUSTED; goto deadletter
	:: res == CONFLICT -> reason = R_CONFLICT; goto deadletter  /* never runs */
	:: res == ACQUIRED -> skip
	fi;

	/* The handler runs; the extender may extend the lease. An extension
	 * refused by fencing cancels the handler at once: no effect, no
	 * Complete or Release; nack (lease_lost). */
	if
	:: true -> extend(tok, ok);
		if
		:: !ok -> goto deliver
		:: else -> skip
		fi
	:: true -> skip
	fi;
	CRASH_POINT;

	if
	:: !POISONED(m) ->                        /* the handler succeeds */
#ifdef INBOX
		inbox(tok, ok);
		CRASH_POINT;
		if
		:: ok -> goto acking
		:: else -> goto deliver                   /* lease lost: nack */
		fi
#else
		d_step {
			effects++;                            /* the effect, outside the store */
#ifdef EXPECT_DUP
			assert(effects <= 1);                 /* lease mode: one effect */
#endif
			skip
		};
		CRASH_POINT;
		d_step { reqs++; req = reqs };
		complete(tok, req, ok);
		if
		:: resends < MAX_RESENDS ->
			/* the reply was lost; the middleware retries the call */
			resends++;
#ifdef MUTANT_COMPLETE_NEW_ID
			d_step { reqs++; req = reqs };
#endif
			complete(tok, req, ok)
		:: true -> skip
		fi;
		/* an applied Complete is reported as applied, never as a lost lease */
		assert(ok || donetok != tok || myepoch != epoch);
		CRASH_POINT;
		if
		:: ok -> goto acking
		:: else -> goto deliver                   /* LeaseLostError: nack */
		fi
#endif
	:: !POISONED(m) -> kind = R_TRANSIENT
	:: !POISONED(m) -> kind = R_PERMANENT     /* retry.Permanent, a *dlq.FinalError, a panic charged as one */
	:: !POISONED(m) && shutdowns < MAX_SHUTDOWNS -> shutdowns++; kind = R_CANCELED  /* the context was canceled: shutdown */
	:: POISONED(m) -> KILLED; goto deliver    /* the process dies in the handler (inbox: its transaction rolls back) */
	fi;

#ifdef INTX
releasing:                                /* (a label a goto may reach: not on a d_step) */
	skip;
#endif
	d_step { reqs++; req = reqs };
	release(tok, req, kind, ok);
	if
	:: resends < MAX_RESENDS -> resends++; release(tok, req, kind, ok)
	:: true -> skip
	fi;
	CRASH_POINT;
#ifdef STALE_VERDICT
	/* The code before the fix: a permanent error was dead-lettered (and
	 * the message acked) even when Release found the lease lost. */
	if
	:: kind == R_PERMANENT -> reason = R_PERMANENT; goto deadletter
	:: else -> goto deliver
	fi;
#else
	if
	:: kind == R_CANCELED ->
#ifdef MUTANT_SHUTDOWN_DEADLETTERS
		/* the handler's error was permanent too, and it won */
		if
		:: ok -> reason = R_PERMANENT; goto deadletter
		:: true -> goto deliver
		fi
#else
		goto deliver        /* shutdown wins over permanent: nack, nothing charged */
#endif
	:: kind != R_CANCELED && !ok -> goto deliver     /* lease lost: the new owner decides; nack */
	:: kind == R_PERMANENT && ok -> reason = R_PERMANENT; goto deadletter
	:: kind == R_TRANSIENT && ok -> goto deliver     /* nack with the backoff delay */
	fi;
#endif

deadletter:
	if
	:: dlfails < MAX_DL_FAILS -> dlfails++; goto deliver   /* publish failed: nack */
	:: true -> d_step {
		if
		:: reason == R_CONFLICT ->
			/* the record belongs to another payload */
			assert(myepoch != epoch || fp != FP(m))
		:: else ->
			/* DL_FINAL: only an EXHAUSTED operation of this payload is
			 * dead-lettered (nobody can still complete it), and it stays so */
			assert(myepoch != epoch || (state == EXH && fp == FP(m)));
			finaldl = (myepoch == epoch)
		fi;
		dl[m] = true
	   }
	fi;
	CRASH_POINT;

acking:
	skip;
	d_step {
		/* no message lost: acked only once its operation committed or its
		 * dead letter was published */
		assert((donefp & FP(m)) != 0 || dl[m]);
		acked[m] = true;
		ACKED_OK(m)      /* and its effect committed */
	};
	goto deliver;

#ifdef INTX
/* The one transaction of a first delivery (sqlstore's inboxOneTx): the
 * claim, the effect and the DONE mark under the row lock, committed
 * together; a crash at any point inside rolls all of it back, and the
 * redelivery (count 2) commits its claim first. The order of the steps
 * inside is not visible to anyone else: they wait for the lock. */
onetx:
	txclaim(m, tok, res);
	TX_CRASH_POINT;
	if
	:: res == ACQUIRED -> skip
	:: else -> TX_COMMIT; CRASH_POINT; goto dispatch  /* no attempt: commit what the claim changed */
	fi;
	if
	:: !POISONED(m) ->                        /* the handler succeeds */
		d_step { effects++; effp = effp | fp; CHECK_EFFECTS };  /* the effect, uncommitted */
		TX_CRASH_POINT;
#ifdef MUTANT_INTX_DONE_OUTSIDE
		TX_COMMIT;                            /* claim and effect committed ... */
		CRASH_POINT;
		d_step { reqs++; req = reqs };
		complete(tok, req, ok);               /* ... and DONE in a commit of its own */
		CRASH_POINT;
		if
		:: ok -> goto acking
		:: else -> goto deliver
		fi
#else
		d_step {                              /* the DONE mark, uncommitted */
			ACCEPTED(tok); state = DONE; live = false;
			donetok = tok; donefp = donefp | fp
		};
		TX_CRASH_POINT;
#ifdef MUTANT_INTX_ACK_BEFORE_COMMIT
		d_step { acked[m] = true };           /* acked before COMMIT */
		TX_CRASH_POINT;
		TX_COMMIT;
		goto deliver
#else
		TX_COMMIT;
		CRASH_POINT;                          /* after COMMIT, before the ack */
		goto acking
#endif
#endif
	:: !POISONED(m) -> kind = R_TRANSIENT
	:: !POISONED(m) -> kind = R_PERMANENT
	:: !POISONED(m) && shutdowns < MAX_SHUTDOWNS -> shutdowns++; kind = R_CANCELED
	:: POISONED(m) -> TX_ROLLBACK; KILLED; goto deliver  /* dies inside the transaction */
	fi;
	/* The handler failed: the rollback took the claim with the effect. The
	 * inbox claims again, committed, for the dedup step to record the
	 * failure on; if the record is no longer claimable, another owner
	 * decides it: nack. */
	TX_ROLLBACK;
	claim(m, tok, res);
	CRASH_POINT;
	if
	:: res == ACQUIRED -> goto releasing
	:: else -> goto deliver
	fi
#endif
}

/* Leases expire whenever the clock says so; a record that is not held by a
 * live lease may outlive its retention and be forgotten. */
active proctype clock() {
end:
	do
	:: d_step { state == INPROG && live -> live = false }
	:: d_step {
		expiries < MAX_EXPIRIES && state != NONE && !(state == INPROG && live) && UNLOCKED ->
		expiries++; epoch++;
		state = NONE; fp = 0; cur = 0; attempts = 0; refunded = 0; base = 0;
		reopened = 0; live = false; lastreq = 0;
		holder = 0; lastatt = 0; grants = 0; grefunds = 0; donetok = 0;
		finaldl = false; effects = 0
	   }
	od
}

/* An operator replays the dead letter of the original (run id 1). */
active proctype replayer() {
#ifndef NO_REPLAY
end:
	dl[0] -> sent1 = true
#else
	skip
#endif
}

init {
	atomic { run consumer(); run consumer() }
}

/* Eventually every message published is acked for good, each DONE or
 * dead-lettered (checked with weak fairness: every lease does expire). */
#define ALLACKED (acked[0] && (!sent1 || acked[1]) && (!sent2 || acked[2]))
ltl eventually { <>[] ALLACKED }
