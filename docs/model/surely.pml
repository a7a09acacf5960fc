/*
 * surely's dedup protocol for one operation key: claim / complete /
 * release / extend with fencing tokens, two consumers, a broker that
 * redelivers an unacked message to any consumer at any time, leases that
 * expire at any time, reply loss with client re-sends (the Redis store's
 * request ids), a failing dead-letter publish, and a crash after every
 * step. See README.md in this directory for what is abstracted.
 *
 * Build flags (spin -D...):
 *   INBOX      transactional inbox: effect and DONE commit atomically
 *              (sqlstore.Inbox); without it, lease mode (effect outside
 *              the store, Complete after it).
 *   EXPECT_DUP lease mode only: assert that the effect ran at most once,
 *              which lease mode does NOT promise; check.sh expects spin to
 *              find the trace (a crash or a lost lease after the effect).
 *   STALE_VERDICT  the release path as it was before the fix: a stale
 *              owner's permanent error dead-lettered the message while
 *              another owner held (or had completed) the operation;
 *              check.sh expects spin to find that trace.
 */

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

mtype = { NONE, INPROG, FAILED, DONE, EXH };                 /* record state */
mtype = { ACQUIRED, COMPLETED, INPROGRESS, EXHAUSTED };      /* claim result */

/* The store's record of the key. */
mtype state = NONE;
byte  cur = 0;        /* current fencing token (0: none) */
byte  minted = 0;     /* tokens handed out so far */
byte  attempts = 0;   /* every claim ever made */
bool  live = false;   /* the current lease has not expired */
byte  lastreq = 0;    /* request id of the last Complete/Release applied */

/* The world outside the store. */
bool  acked = false;  /* the broker has the message acked */
bool  dl = false;     /* a dead letter was published */
byte  effects = 0;    /* business effects that happened */
byte  crashes = 0;
byte  dlfails = 0;
byte  resends = 0;
byte  reqs = 0;       /* request ids minted */

/* An accepted Complete/Release/Extend must carry the current token and
 * find the record IN_PROGRESS; the attempt count never goes down and never
 * passes the budget. Checked inside every store operation. */
#define FENCED(tok)   (state == INPROG && cur == tok && tok != 0)
/* Checked first in every branch that changes the record on behalf of a
 * lease holder: no Complete, Release, Extend or inbox commit is accepted
 * with a stale token. */
#define ACCEPTED(tok) assert(state == INPROG && cur == tok)
#define ATTEMPTS_OK(before) assert(attempts >= before && attempts <= MAX_ATTEMPTS); before = 0

/* A crash: the process dies here, its delivery goes back to the broker,
 * its lease (if any) is left to expire. */
#define CRASH_POINT \
	if \
	:: crashes < MAX_CRASHES -> crashes++; goto died \
	:: true -> skip \
	fi

/* Claim (memstore.Claim, claim.lua), atomic in the store. A re-send of a
 * claim whose reply was lost carries the same token and is answered again
 * (claim.lua's "r[8] == token" branch). */
inline claim(tok, res) {
	d_step {
		byte before = attempts;
		if
		:: state == DONE -> res = COMPLETED
		:: state == EXH -> res = EXHAUSTED
		:: state == INPROG && cur == tok && tok != 0 -> res = ACQUIRED  /* re-send */
		:: state == INPROG && cur != tok && live -> res = INPROGRESS
		:: (state == NONE) || (state == FAILED) || (state == INPROG && cur != tok && !live) ->
			if
			:: attempts >= MAX_ATTEMPTS -> state = EXH; live = false; res = EXHAUSTED
			:: else ->
				attempts++; minted++; cur = minted; tok = cur;
				state = INPROG; live = true; res = ACQUIRED
			fi
		fi;
		ATTEMPTS_OK(before)
	}
}

/* Extend (extend.lua). */
inline extend(tok, ok) {
	d_step {
		if
		:: FENCED(tok) -> ACCEPTED(tok); live = true; ok = true
		:: else -> ok = false
		fi
	}
}

/* Complete (complete.lua): a re-send of the very call that was applied
 * answers success again; otherwise the token must be current. */
inline complete(tok, req, ok) {
	d_step {
		byte before = attempts;
		if
		:: lastreq == req && req != 0 -> ok = true
		:: FENCED(tok) -> ACCEPTED(tok); state = DONE; live = false; lastreq = req; ok = true
		:: else -> ok = false
		fi;
		ATTEMPTS_OK(before)
	}
}

/* Release (release.lua). final: the handler's error is permanent. */
inline release(tok, req, final, ok) {
	d_step {
		byte before = attempts;
		if
		:: lastreq == req && req != 0 -> ok = true
		:: FENCED(tok) ->
			ACCEPTED(tok);
			if
			:: final -> state = EXH
			:: else -> state = FAILED
			fi;
			live = false; lastreq = req; ok = true
		:: else -> ok = false
		fi;
		ATTEMPTS_OK(before)
	}
}

/* The transactional inbox (sqlstore.Inbox): lock the row, check the token,
 * run the effect, mark DONE, commit; a stale owner rolls back. A crash
 * inside the transaction rolls it back: both or neither. */
inline inbox(tok, ok) {
	d_step {
		if
		:: FENCED(tok) ->
			ACCEPTED(tok);
			effects++; state = DONE; live = false; ok = true;
			assert(effects <= 1)   /* never two effects in inbox mode */
		:: else -> ok = false
		fi
	}
}

/* The broker's ack: only after DONE or a published dead letter. */
inline ack() {
	d_step {
		assert(state == DONE || dl);   /* no message lost */
		acked = true
	}
}

/* One consumer process: the router, handler.New's chain and the business
 * handler, restarted after every crash. */
proctype consumer() {
	byte tok, req;
	mtype res;
	bool ok, final, extended;

deliver:
	tok = 0; req = 0; ok = false; final = false; extended = false; res = 0;
	if
	:: acked -> goto stop
	:: !acked -> skip          /* the broker hands the message out */
	fi;

	claim(tok, res);
	CRASH_POINT;
	if
	:: resends < MAX_RESENDS && res == ACQUIRED ->
		/* the reply was lost: go-redis re-sends the same claim */
		resends++; claim(tok, res); CRASH_POINT
	:: true -> skip
	fi;
	if
	:: res == COMPLETED -> goto acking       /* duplicate: re-emit and ack */
	:: res == INPROGRESS -> goto deliver     /* nack with a delay */
	:: res == EXHAUSTED -> goto deadletter
	:: res == ACQUIRED -> skip
	fi;

	/* The handler runs; the extender may keep the lease (bounded hold).
	 * An extension refused by fencing cancels the handler at once: no
	 * effect, no Complete or Release; nack (lease_lost). */
	if
	:: !extended -> extended = true; extend(tok, ok);
		if
		:: !ok -> goto deliver
		:: else -> skip
		fi
	:: true -> skip
	fi;
	CRASH_POINT;

	if
	:: true ->                                /* the handler succeeds */
#ifdef INBOX
		inbox(tok, ok);
		CRASH_POINT;
		if
		:: ok -> goto acking
		:: else -> goto deliver                   /* lease lost: nack */
		fi
#else
		effects++;                                /* the effect, outside the store */
#ifdef EXPECT_DUP
		assert(effects <= 1);
#endif
		CRASH_POINT;
		d_step { reqs++; req = reqs };
		complete(tok, req, ok);
		if
		:: resends < MAX_RESENDS -> resends++; complete(tok, req, ok)
		:: true -> skip
		fi;
		CRASH_POINT;
		if
		:: ok -> goto acking
		:: else -> goto deliver                   /* LeaseLostError: nack */
		fi
#endif
	:: true -> final = false                   /* transient error */
	:: true -> final = true                    /* permanent error (or a panic charged as one) */
	fi;

	d_step { reqs++; req = reqs };
	release(tok, req, final, ok);
	if
	:: resends < MAX_RESENDS -> resends++; release(tok, req, final, ok)
	:: true -> skip
	fi;
	CRASH_POINT;
#ifdef STALE_VERDICT
	/* The code before the fix: a permanent error was dead-lettered (and
	 * the message acked) even when Release found the lease lost. */
	if
	:: final -> goto deadletter
	:: else -> goto deliver
	fi;
#else
	if
	:: !ok -> goto deliver          /* lease lost: the new owner decides; nack */
	:: ok && final -> goto deadletter   /* permanent: EXHAUSTED, dead letter */
	:: ok && !final -> goto deliver     /* transient: nack, next durable attempt */
	fi;
#endif

deadletter:
	if
	:: dlfails < MAX_DL_FAILS -> dlfails++; goto deliver   /* publish failed: nack */
	:: true -> d_step {
		/* only an EXHAUSTED operation is dead-lettered: nobody can
		 * still complete it */
		assert(state == EXH);
		dl = true
	   }
	fi;
	CRASH_POINT;

acking:
	ack();
	goto stop;

died:
	goto deliver;

stop:
	skip
}

/* Leases expire whenever the clock says so. */
active proctype clock() {
end:
	do
	:: d_step { state == INPROG && live -> live = false }
	od
}

init {
	atomic { run consumer(); run consumer() }
}

/* Eventually the message is acked, and by then it is DONE or dead-lettered
 * (checked with weak fairness: every lease does expire). */
ltl eventually { <> (acked && (state == DONE || dl)) }
