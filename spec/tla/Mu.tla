--------------------------------- MODULE Mu ---------------------------------
(***************************************************************************)
(* Mu's replication plane (Mu, OSDI 2020, section 4, Listings 1-4) and its *)
(* permission manager (section 5.2): consensus by one-sided reads and      *)
(* writes into passive logs, made safe by write permissions.               *)
(*                                                                         *)
(* Replicas are 1..N.  Each has a log in its memory (minProposal, FUO,     *)
(* slots of (proposal, value)) and a permission manager that decides who   *)
(* may write that log.  Any replica in Leaders may start a leader attempt  *)
(* at any moment: leader election is left out, so safety cannot depend on  *)
(* it.                                                                     *)
(* An attempt asks every permission manager for write access, confirms a   *)
(* majority (itself included), reads their FUOs, catches up from the most  *)
(* advanced one, brings the lagging ones up to date, then runs prepare and *)
(* accept slot after slot, omitting prepare once it found only empty       *)
(* slots.  Aborting is starting a new attempt.                             *)
(*                                                                         *)
(* Remote writes are posted by the leader and land later, in FIFO order    *)
(* per (leader, replica) connection.  A write takes effect only if its     *)
(* writer may write the target log when it lands; a revocation fails the  *)
(* revoked replica's writes in flight (revocation is a barrier).  A grant  *)
(* only changes access: a write posted while its writer had no access     *)
(* lands if the writer has been granted access again by then.  So a       *)
(* leader asks a replica for access only when none of its writes to that  *)
(* replica is in flight; otherwise it asks once they have all landed or    *)
(* failed (the implementation learns that from a fence, a signaled read    *)
(* behind them).  Remote reads land behind the writes in flight on their   *)
(* connection; the reads of one step are taken when the leader acts on     *)
(* them (see docs/verification/tla.md for why that is enough).             *)
(*                                                                         *)
(* Variants: GrantBeforeRevoke = TRUE is the mutated permission manager:   *)
(* it grants the requester and acknowledges first, and revokes the old     *)
(* holder in a later step.  AskFences = FALSE drops the leader's fence: a  *)
(* new attempt asks every replica at once.  GrantFences = TRUE is the      *)
(* other way out, which the implementation does not take: a grant fails   *)
(* the grantee's writes in flight, as a revocation does.                   *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    N,                  \* number of replicas
    Leaders,            \* the replicas that may lead (a subset, to keep the model small)
    S,                  \* number of log slots
    MaxAttempts,        \* leader attempts in all: starts, and restarts after an abort
    GrantBeforeRevoke,  \* TRUE: the mutated permission manager
    GrantFences,        \* TRUE: a grant fails the grantee's writes in flight (not implemented)
    AskFences,          \* TRUE: a leader asks a replica only with no write to it in flight
    SkipDoomedWrites    \* TRUE: writes that must fail are not posted (a reduction, see Useful)

ASSUME N \in Nat \ {0} /\ S \in Nat \ {0} /\ MaxAttempts \in Nat
ASSUME Leaders \subseteq 1..N
ASSUME GrantBeforeRevoke \in BOOLEAN /\ GrantFences \in BOOLEAN /\ AskFences \in BOOLEAN
ASSUME SkipDoomedWrites \in BOOLEAN
\* The reduction is sound only where a write posted without access cannot land (see Useful).
ASSUME SkipDoomedWrites => GrantFences \/ AskFences

R        == 1..N
Slots    == 1..S
IsQuorum(Q) == 2 * Cardinality(Q) > N
Nobody   == 0
Attempts == 1..MaxAttempts
\* A leader's own value is the number of its attempt: values of different attempts differ.
Values   == Attempts
Empty    == [b |-> 0, v |-> 0]
Max(a, b) == IF a >= b THEN a ELSE b
\* A proposal number above m that only leader l uses (rounds times N, plus l's position;
\* the implementation uses round << 16 | position + 1).
NewBallot(m, l) == (m \div N + 1) * N + (l - 1)
MaxBallot == (MaxAttempts * S + 1) * N + N
Ballots  == 0..MaxBallot
Entries  == [b : Ballots, v : Values \cup {0}]

Phases == {"idle",     \* not leading
           "perm",     \* Listing 2 lines 9-12: requests sent, collecting grants
           "update",   \* Listing 4: update-followers writes in flight
           "pread",    \* ready to prepare the slot at the FUO
           "pwrite",   \* Listing 2 line 22: minProposal writes in flight
           "accept",   \* Listing 2 line 31: accept writes in flight
           "end"}      \* every slot decided

VARIABLES
    \* ---- replica memory (Listing 1) ----
    log,        \* log[r][s]: the (proposal, value) in slot s of r's log; Empty if none
    minProp,    \* minProp[r]: r's minProposal
    fuo,        \* fuo[r]: r's first undecided offset, in 1..S+1
    \* ---- permission managers (section 5.2) ----
    writers,    \* writers[r]: the replicas that may write r's log now
    reqs,       \* reqs[r]: the replicas whose permission requests to r are pending
    pmReq,      \* pmReq[r]: the requester granted but not yet alone (mutated manager only)
    \* ---- leaders ----
    attempts,   \* leader attempts started so far
    att,        \* att[l]: l's current attempt (0: never led)
    phase,      \* phase[l]
    conf,       \* conf[l]: l's confirmed followers, l included
    done,       \* done[l]: who answered l's current step (grants, update, prepare, accept)
    bal,        \* bal[l]: l's proposal number, the last one it picked
    prepared,   \* prepared[l]: l omits prepare (it found only empty slots)
    deferred,   \* deferred[l]: replicas l asks for access once its writes to them are done
    \* ---- the network ----
    net,        \* net[l][r]: l's writes to r's log in flight, oldest first
    \* ---- history, for the properties only ----
    acc,        \* every acceptance: <<slot, proposal, value, replica>>
    chosen      \* chosen[s]: values accepted at s with one proposal number by a majority

replicaVars == <<log, minProp, fuo>>
permVars    == <<writers, reqs, pmReq>>
leaderVars  == <<attempts, att, phase, conf, done, bal, prepared, deferred>>
hist        == <<acc, chosen>>
vars        == <<replicaVars, permVars, leaderVars, net, hist>>

OpOK(op) == /\ op.k \in {"upd", "mp", "acc"}
            /\ op.a \in BOOLEAN
            /\ op.s \in 1..S+1 /\ op.f \in 1..S+1
            /\ op.b \in Ballots /\ op.v \in Values \cup {0}
            /\ DOMAIN op.d \subseteq Slots
            /\ \A s \in DOMAIN op.d : op.d[s] \in Entries

TypeOK ==
    /\ log \in [R -> [Slots -> Entries]]
    /\ minProp \in [R -> Ballots]
    /\ fuo \in [R -> 1..S+1]
    /\ writers \in [R -> SUBSET R]
    /\ reqs \in [R -> SUBSET R]
    /\ pmReq \in [R -> R \cup {Nobody}]
    /\ attempts \in 0..MaxAttempts
    /\ att \in [R -> 0..MaxAttempts]
    /\ phase \in [R -> Phases]
    /\ conf \in [R -> SUBSET R]
    /\ done \in [R -> SUBSET R]
    /\ bal \in [R -> Ballots]
    /\ prepared \in [R -> BOOLEAN]
    /\ deferred \in [R -> SUBSET R]
    /\ \A l, r \in R : \A i \in 1..Len(net[l][r]) : OpOK(net[l][r][i])
    /\ acc \subseteq (Slots \X Ballots \X Values \X R)
    /\ chosen \in [Slots -> SUBSET Values]

Init ==
    /\ log = [r \in R |-> [s \in Slots |-> Empty]]
    /\ minProp = [r \in R |-> 0]
    /\ fuo = [r \in R |-> 1]
    /\ writers = [r \in R |-> {}]     \* no one may write a log before its manager grants it
    /\ reqs = [r \in R |-> {}]
    /\ pmReq = [r \in R |-> Nobody]
    /\ attempts = 0
    /\ att = [l \in R |-> 0]
    /\ phase = [l \in R |-> "idle"]
    /\ conf = [l \in R |-> {}]
    /\ done = [l \in R |-> {}]
    /\ bal = [l \in R |-> 0]
    /\ prepared = [l \in R |-> FALSE]
    /\ deferred = [l \in R |-> {}]
    /\ net = [l \in R |-> [r \in R |-> <<>>]]
    /\ acc = {}
    /\ chosen = [s \in Slots |-> {}]

-----------------------------------------------------------------------------
(* Permission manager of replica r (section 5.2).                           *)

Pending(r, l) == l \in reqs[r]

\* Write access to r's log becomes W, and r's manager acknowledges to ack (a replica, or
\* Nobody); the acknowledgement counts if ack is still collecting grants and has asked r in
\* its current attempt (not still deferred: the leader counts only the grants it asked for in
\* its current round).  A request word holds a requester's latest request: a new attempt's
\* request replaces the previous one.
\*  - The writes in flight to r of every replica whose access was revoked fail (revocation is
\*    a barrier).  With GrantFences, so do those of every replica granted access.
\*  - A leader r that loses its own log while it needs it for its next step can do nothing
\*    more in this attempt (its next write to its own log fails): it is set idle at once,
\*    which only merges states.
Serve(r, W, ack) ==
    LET changed == IF GrantFences THEN (writers[r] \ W) \cup (W \ writers[r])
                   ELSE writers[r] \ W
        stop    == /\ r \in writers[r] /\ r \notin W
                   /\ phase[r] \in {"update", "pread", "pwrite", "accept"}
    IN
    /\ writers' = [writers EXCEPT ![r] = W]
    /\ net' = [l \in R |-> [t \in R |->
                  IF t = r /\ l \in changed THEN <<>> ELSE net[l][t]]]
    /\ reqs' = IF ack = Nobody THEN reqs ELSE [reqs EXCEPT ![r] = @ \ {ack}]
    /\ done' = [x \in R |-> IF x = ack /\ phase[x] = "perm" /\ r \notin deferred[x]
                            THEN done[x] \cup {r}
                            ELSE IF x = r /\ stop THEN {}
                            ELSE done[x]]
    /\ phase' = IF stop THEN [phase EXCEPT ![r] = "idle"] ELSE phase
    /\ conf' = IF stop THEN [conf EXCEPT ![r] = {}] ELSE conf
    /\ prepared' = IF stop THEN [prepared EXCEPT ![r] = FALSE] ELSE prepared

\* The permission manager serves a pending request: revoke the current holder, grant the
\* requester, acknowledge.  One step: while no one holds the log nothing can land in it.
\* (A holder that asks again keeps its access.)
PmServe(r, l) ==
    /\ ~GrantBeforeRevoke
    /\ Pending(r, l)
    /\ Serve(r, {l}, l)
    /\ UNCHANGED <<replicaVars, pmReq, attempts, att, bal, deferred, hist>>

\* The mutated permission manager grants the requester and acknowledges first ...
PmGrantFirst(r, l) ==
    /\ GrantBeforeRevoke
    /\ pmReq[r] = Nobody
    /\ Pending(r, l)
    /\ pmReq' = [pmReq EXCEPT ![r] = l]
    /\ Serve(r, writers[r] \cup {l}, l)
    /\ UNCHANGED <<replicaVars, attempts, att, bal, deferred, hist>>

\* ... and revokes the old holder in a later step.
PmRevokeLater(r) ==
    /\ GrantBeforeRevoke
    /\ pmReq[r] # Nobody
    /\ pmReq' = [pmReq EXCEPT ![r] = Nobody]
    /\ Serve(r, {pmReq[r]}, Nobody)
    /\ UNCHANGED <<replicaVars, attempts, att, bal, deferred, hist>>

-----------------------------------------------------------------------------
(* The network.                                                             *)

\* Replica r accepts (b, v) at slot s (history).
Record(s, b, v, r) ==
    LET acc2 == acc \cup {<<s, b, v, r>>} IN
    /\ acc' = acc2
    /\ chosen' = IF IsQuorum({q \in R : <<s, b, v, q>> \in acc2})
                 THEN [chosen EXCEPT ![s] = @ \cup {v}] ELSE chosen

\* The oldest write in flight from l to r lands: it takes effect if l may write r's log now,
\* and fails otherwise.  A success is an answer to l if it belongs to l's current step.
Land(l, r) ==
    /\ net[l][r] # <<>>
    /\ LET op  == Head(net[l][r])
           cur == op.a
       IN
       /\ net' = [net EXCEPT ![l][r] = Tail(@)]
       /\ IF l \notin writers[r]
            THEN UNCHANGED <<replicaVars, done, acc, chosen>>
          ELSE IF op.k = "upd" THEN              \* Listing 4: the slots, then the FUO
            /\ log' = [log EXCEPT ![r] = [s \in Slots |-> IF s \in DOMAIN op.d THEN op.d[s]
                                                           ELSE @[s]]]
            /\ fuo' = [fuo EXCEPT ![r] = op.f]
            /\ done' = IF cur /\ phase[l] = "update"
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<minProp, acc, chosen>>
          ELSE IF op.k = "mp" THEN               \* Listing 2 line 22
            /\ minProp' = [minProp EXCEPT ![r] = op.b]
            /\ done' = IF cur /\ phase[l] = "pwrite" /\ op.b = bal[l]
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<log, fuo, acc, chosen>>
          ELSE                                   \* "acc": Listing 2 line 31
            /\ log' = [log EXCEPT ![r][op.s] = [b |-> op.b, v |-> op.v]]
            /\ Record(op.s, op.b, op.v, r)
            /\ done' = IF cur /\ phase[l] = "accept" /\ op.s = fuo[l] /\ op.b = bal[l]
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<minProp, fuo>>
    /\ UNCHANGED <<permVars, attempts, att, phase, conf, bal, prepared, deferred>>

\* l may post to r now a write that can take effect.  With SkipDoomedWrites, a write to a log
\* l may not write now is left out: it would fail when it lands.  l can get access to r back
\* only through a grant, and
\*  - with GrantFences, a grant fails the grantee's writes in flight;
\*  - with AskFences, l's request is pending at r only while none of l's writes to r is in
\*    flight (FencedAsks, an invariant), so r cannot grant l access before the write has landed.
\* Why leaving such writes out is sound: the revocation that took r's log from l emptied
\* net[l][r] (revocation is a barrier), and l posts to r only once r granted it.  So while l
\* may not write r's log, every write in net[l][r] was posted without access and fails.  The
\* reduced model is the full one where each of them fails as soon as it is posted; and every
\* behaviour of the full one is a behaviour of the reduced one but for net[l][r], which only
\* holds back reads and requests on that connection (CanRead, AskAfterFence).  The properties
\* do not mention net.  MuAllWrites.cfg checks the full model (SkipDoomedWrites = FALSE) at a
\* smaller bound; FencedAsks is checked with the reduction too, as the reduction would hide a
\* missing fence from Agreement.
Useful(l, r) == l \in writers[r] \/ ~SkipDoomedWrites

\* l posts op to every replica in T.
Post(l, T, op) ==
    net' = [net EXCEPT ![l] = [r \in R |-> IF r \in T /\ Useful(l, r)
                                           THEN Append(@[r], op) ELSE @[r]]]

\* A write: kind, whether it belongs to the current attempt of its writer, slot (first slot
\* for "upd"), FUO ("upd"), proposal number, value, slots ("upd").
MkOp(k, s, f, b, v, d) == [k |-> k, a |-> TRUE, s |-> s, f |-> f, b |-> b, v |-> v, d |-> d]
NoData == [s \in {} |-> Empty]

\* l can read r's log now: its read lands behind l's writes in flight to r (FIFO).  Reading
\* its own log is local.
CanRead(l, r) == r = l \/ net[l][r] = <<>>

\* The sets of replicas a step of l may read: a majority, l included, readable now.
ReadQuorums(l, from) ==
    {Q \in SUBSET from : l \in Q /\ IsQuorum(Q) /\ \A r \in Q : CanRead(l, r)}

-----------------------------------------------------------------------------
(* Leader l.                                                                *)

\* l decides it leads, or aborts and starts over (section 4.1): a new attempt asks every
\* permission manager, its own included, for write access.  Writes posted by earlier
\* attempts may still be in flight.  With AskFences, l asks at once only its own manager (its
\* own log is written locally) and those of the replicas it has no write in flight to; it asks
\* the others once those writes have landed or failed (AskAfterFence).  A request of an
\* earlier attempt still pending at a replica stays (its request word is still published);
\* by FencedAsks, l then has no write in flight to that replica and asks it at once anyway.
Start(l) ==
    LET later == IF AskFences THEN {r \in R \ {l} : net[l][r] # <<>>} ELSE {}
    IN
    /\ attempts < MaxAttempts
    /\ attempts' = attempts + 1
    /\ att' = [att EXCEPT ![l] = attempts + 1]
    /\ phase' = [phase EXCEPT ![l] = "perm"]
    /\ reqs' = [r \in R |-> IF r \in later THEN reqs[r] ELSE reqs[r] \cup {l}]
    /\ deferred' = [deferred EXCEPT ![l] = later]
    \* l's writes in flight from earlier attempts are no answer to this one
    /\ net' = [net EXCEPT ![l] = [r \in R |-> [i \in 1..Len(@[r]) |-> [@[r][i] EXCEPT !.a = FALSE]]]]
    /\ conf' = [conf EXCEPT ![l] = {}]
    /\ done' = [done EXCEPT ![l] = {}]
    /\ prepared' = [prepared EXCEPT ![l] = FALSE]
    /\ UNCHANGED <<replicaVars, writers, pmReq, bal, hist>>

\* With AskFences: everything l posted to r has landed or failed (in the implementation, a
\* fence posted behind those writes on the FIFO connection has completed), so l asks r now.
\* Whatever l's phase, as the implementation does: if l has confirmed its followers meanwhile,
\* the grant is a late one (not counted, but it still takes the log from its holder); if l has
\* stopped leading, it is a request like any other.  A new Start recomputes the set.
AskAfterFence(l, r) ==
    /\ r \in deferred[l]
    /\ net[l][r] = <<>>
    /\ reqs' = [reqs EXCEPT ![r] = @ \cup {l}]
    /\ deferred' = [deferred EXCEPT ![l] = @ \ {r}]
    /\ UNCHANGED <<replicaVars, writers, pmReq, attempts, att, phase, conf, done, bal,
                   prepared, net, hist>>

\* Listing 2 lines 9-12: a majority granted, l itself among them (it must own its own log
\* before touching it): they are the confirmed followers.  Then Listing 3: read their FUOs,
\* copy the most advanced one's slots below its FUO into l's own log (l must still hold it),
\* and Listing 4: post to every lagging follower the slots it lacks and l's new FUO.
Confirm(l) ==
    /\ phase[l] = "perm"
    /\ l \in done[l]
    /\ IsQuorum(done[l])
    /\ \A r \in done[l] : CanRead(l, r)
    /\ LET cf  == done[l]
           top == CHOOSE m \in {fuo[r] : r \in cf} : \A r \in cf : fuo[r] <= m
           src == IF fuo[l] = top THEN l ELSE CHOOSE r \in cf : fuo[r] = top
           newLog == [s \in Slots |-> IF fuo[l] <= s /\ s < top THEN log[src][s]
                                      ELSE log[l][s]]
           lagging == {r \in cf \ {l} : fuo[r] < top}
       IN
       /\ IF src = l
            THEN UNCHANGED <<log, fuo>>
            ELSE /\ l \in writers[l]
                 /\ log' = [log EXCEPT ![l] = newLog]
                 /\ fuo' = [fuo EXCEPT ![l] = top]
       /\ net' = [net EXCEPT ![l] =
                    [r \in R |-> IF r \in lagging /\ Useful(l, r)
                                 THEN Append(@[r],
                                        MkOp("upd", fuo[r], top, 0, 0,
                                             [s \in fuo[r]..(top - 1) |-> newLog[s]]))
                                 ELSE @[r]]]
       /\ conf' = [conf EXCEPT ![l] = cf]
       /\ done' = [done EXCEPT ![l] = cf \ lagging]
    /\ phase' = [phase EXCEPT ![l] = "update"]
    /\ UNCHANGED <<minProp, permVars, attempts, att, bal, prepared, deferred, hist>>

\* Listing 2 lines 19-22, once every follower is up to date, or after a commit: read the
\* minProposals of a majority, pick a proposal number above all of them and above every
\* one l used, write it into l's own minProposal and post it to the confirmed followers.
PrepareWrite(l) ==
    /\ \/ phase[l] = "pread"
       \/ phase[l] = "update" /\ done[l] = conf[l]
    /\ fuo[l] <= S
    /\ l \in writers[l]
    /\ \E Q \in ReadQuorums(l, conf[l]) :
          LET m == CHOOSE x \in {minProp[r] : r \in Q} : \A r \in Q : minProp[r] <= x
              b == NewBallot(Max(m, bal[l]), l)
          IN
          /\ bal' = [bal EXCEPT ![l] = b]
          /\ minProp' = [minProp EXCEPT ![l] = b]
          /\ Post(l, conf[l] \ {l}, MkOp("mp", fuo[l], fuo[l], b, 0, NoData))
    /\ phase' = [phase EXCEPT ![l] = "pwrite"]
    /\ done' = [done EXCEPT ![l] = {l}]
    /\ UNCHANGED <<log, fuo, permVars, attempts, att, conf, prepared, deferred, hist>>

\* Listing 2 lines 29-31: write (l's proposal number, v) into slot s of l's own log and post
\* it to the confirmed followers.
Accept(l, s, v) ==
    /\ log' = [log EXCEPT ![l][s] = [b |-> bal[l], v |-> v]]
    /\ Record(s, bal[l], v, l)
    /\ Post(l, conf[l] \ {l}, MkOp("acc", s, s, bal[l], v, NoData))
    /\ phase' = [phase EXCEPT ![l] = "accept"]
    /\ done' = [done EXCEPT ![l] = {l}]

\* Listing 2 lines 23-28: read the slot at l's FUO in a majority whose minProposal write
\* landed (each read behind that write on its connection) and adopt the highest-numbered
\* value, or l's own if all are empty; then omit prepare from now on (section 4.2).  Accept.
EndPrepare(l) ==
    /\ phase[l] = "pwrite"
    /\ l \in writers[l]
    /\ \E Q \in ReadQuorums(l, done[l]) :
          LET es  == {log[r][fuo[l]] : r \in Q}
              top == CHOOSE e \in es : \A x \in es : x.b <= e.b
          IN
          /\ Accept(l, fuo[l], IF top.b = 0 THEN att[l] ELSE top.v)
          /\ prepared' = [prepared EXCEPT ![l] = top.b = 0]
    /\ UNCHANGED <<minProp, fuo, permVars, attempts, att, conf, bal, deferred>>

\* Listing 2 lines 32-36: a majority (l included) holds the entry: commit it by advancing l's
\* FUO.  Then, with prepare omitted, accept l's next value at once; otherwise prepare next.
Commit(l) ==
    /\ phase[l] = "accept"
    /\ IsQuorum(done[l])
    /\ l \in writers[l]
    /\ LET s == fuo[l] IN
       /\ fuo' = [fuo EXCEPT ![l] = s + 1]
       /\ IF s < S /\ prepared[l]
            THEN Accept(l, s + 1, att[l])
          ELSE IF s < S
            THEN /\ phase' = [phase EXCEPT ![l] = "pread"]
                 /\ done' = [done EXCEPT ![l] = {}]
                 /\ UNCHANGED <<log, net, acc, chosen>>
          ELSE   /\ phase' = [phase EXCEPT ![l] = "end"]
                 /\ done' = [done EXCEPT ![l] = {}]
                 /\ UNCHANGED <<log, net, acc, chosen>>
    /\ UNCHANGED <<minProp, permVars, attempts, att, conf, bal, prepared, deferred>>

-----------------------------------------------------------------------------

Next ==
    \/ \E l \in Leaders :
          \/ Start(l)
          \/ \E r \in R : AskAfterFence(l, r)
          \/ Confirm(l)
          \/ PrepareWrite(l)
          \/ EndPrepare(l)
          \/ Commit(l)
          \/ \E r \in R : Land(l, r)
    \/ \E r \in R : \/ \E l \in R : PmServe(r, l) \/ PmGrantFirst(r, l)
                    \/ PmRevokeLater(r)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Properties.                                                              *)

\* Agreement: at most one value is ever chosen at a slot (accepted with one proposal
\* number by a majority, as in Paxos) ...
Agreement == \A s \in Slots : Cardinality(chosen[s]) <= 1

\* ... and every replica's log holds it below the replica's FUO: a leader's log when it
\* commits (it advances its FUO) and a follower's when it is brought up to date.
DecidedAgreement == \A r \in R : \A s \in Slots :
                        s < fuo[r] => log[r][s].v \in chosen[s]

\* Commit piggybacking (section 4.2) is sound: a follower that finds slot s + 1 filled may
\* apply slot s, which then holds the chosen value.
PiggybackSafe == \A r \in R : \A s \in 1..(S - 1) :
                     log[r][s + 1].b # 0 => log[r][s].v \in chosen[s]

\* Single writer (section 5.2): at most one replica may write a log at any time.  As writes
\* are checked when they land, every write that takes effect is then the holder's.
SingleWriter == \A r \in R : Cardinality(writers[r]) <= 1

\* With AskFences, a leader's request is pending at another replica only while none of its
\* writes to that replica is in flight: no write can land after a grant that came after it
\* was posted.  This is what the fence is for, and what makes SkipDoomedWrites sound.
FencedAsks == AskFences => \A l \in R : \A r \in R \ {l} : l \in reqs[r] => net[l][r] = <<>>

=============================================================================
